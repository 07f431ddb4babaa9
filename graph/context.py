"""context: how big a model request is, measured before it is sent.

A model with a tokenizer is counted with it: OpenAI models through `tiktoken`, when the model's
encoding can be loaded (tiktoken fetches an encoding file once and caches it; offline and not yet
cached, the estimate is used). Every other model — the scripted one included — is counted by the
documented estimate of graph/models.py: one token per CHARS_PER_TOKEN characters of the messages
and tool schemas, rounded up, which over-counts English text so a limit trips early, not late.

The measure of each call goes into the budget vector (`usage.context_tokens`: the largest request
so far; `usage.context_tokens_total`: all requests together) and into the `context` state channel
(tokens, growth since the same role's previous call, method, limit), which the node's trace event
records.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any, Callable, Sequence

from langchain_core.messages import BaseMessage

CHARS_PER_TOKEN = 3
"""Characters per token of the estimate (see the module docstring)."""
TOKENS_PER_MESSAGE = 4
"""Framing tokens a chat request adds per message (role and separators), counted by the tokenizer."""

Counter = Callable[[str], int]


@lru_cache(maxsize=32)
def counter_for(model: str) -> tuple[Counter, str]:
    """(count tokens of a text, the method's name) for `model`; cached per process."""
    try:
        import tiktoken

        encoding = tiktoken.encoding_for_model(model)
    except Exception:  # unknown model, or the encoding is not cached and cannot be fetched
        return estimate, "estimate"
    return (lambda text: len(encoding.encode(text, disallowed_special=()))), f"tiktoken:{encoding.name}"


def estimate(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def message_text(message: BaseMessage) -> str:
    """What a message puts on the wire: its content and any tool calls it makes."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    calls = [*getattr(message, "tool_calls", []), *getattr(message, "invalid_tool_calls", [])]
    return content + (json.dumps(calls, default=str) if calls else "")


def measure(model: str, messages: Sequence[BaseMessage], tools: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """(tokens of the request, method) before it is sent."""
    count, method = counter_for(model)
    framing = TOKENS_PER_MESSAGE * len(messages) if method != "estimate" else 0
    text = "".join(message_text(message) for message in messages) + (json.dumps(tools) if tools else "")
    return count(text) + framing, method


def record(previous: dict[str, Any] | None, role: str, tokens: int, method: str, limit: int | None) -> dict[str, Any]:
    """The `context` state value after a `role` request of `tokens`: growth is against the same
    role's previous request (0 for its first)."""
    by_role = dict((previous or {}).get("by_role") or {})
    growth = tokens - by_role[role] if role in by_role else 0
    by_role[role] = tokens
    kept = {key: value for key, value in (previous or {}).items() if key != "pressure"}  # compaction's own keys stay
    return {**kept, "role": role, "tokens": tokens, "growth": growth, "method": method, "limit": limit, "by_role": by_role}


def usage_delta(tokens: int) -> dict[str, int]:
    return {"context_tokens": tokens, "context_tokens_total": tokens}
