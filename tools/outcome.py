"""outcome: what one tool call came to, as the gateway reports it to the loop.

Every proposed call ends in exactly one `CallOutcome` (so every tool call gets exactly one result message), whether it ran,
was refused before running, or failed while running. The status names are the model-facing codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CallStatus = Literal[
    "ok",
    "unknown_tool",
    "invalid_arguments",
    "denied",
    "budget_exceeded",
    "circuit_open",
    "repeated_call",
    "timeout",
    "cancelled",
    "server_unavailable",
    "tool_error",
    "rejected",
    "unknown_after_crash",
    "tool_changed",
    "dependency_unmet",
]

REFUSED_BEFORE_DISPATCH: frozenset[str] = frozenset(
    {"unknown_tool", "invalid_arguments", "denied", "budget_exceeded", "circuit_open", "repeated_call", "rejected", "tool_changed",
     "dependency_unmet"}
)


@dataclass
class CallOutcome:
    """The result of one call. `text` is the full payload; the loop bounds what the model sees."""

    status: CallStatus
    text: str = ""
    structured: Any | None = None
    latency_ms: float = 0.0
    attempts: int = 0
    """How many times the tool was actually dispatched (0 when refused before dispatch)."""
    detail: str = ""
    """Why, for anything but `ok`: the rule that denied, the error the server gave, the limit hit."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
