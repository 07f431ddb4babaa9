"""registry: the tools a run may see, as the gateway knows them.

Owns `ToolSpec` (one MCP tool under its namespaced name) and `ToolRegistry` (lookup by the
name the model uses). Never talks to a server: the bridge fills it, the gate reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

NAME_SEPARATOR = "__"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def qualified_name(server: str, tool: str) -> str:
    """The name the model sees: `<server>__<tool>`, restricted to what every provider accepts."""
    return _UNSAFE_NAME_CHARS.sub("_", f"{server}{NAME_SEPARATOR}{tool}")[:64]


@dataclass(frozen=True)
class ToolHints:
    """MCP tool annotations with the spec's defaults filled in (an unannotated tool may write,
    may destroy, is not idempotent and reaches the open world)."""

    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    annotated: bool = True
    """False when the server sent no annotations at all (the policy names that case on its own)."""

    @classmethod
    def from_annotations(cls, annotations: Any | None) -> "ToolHints":
        if annotations is None:
            return cls(annotated=False)

        def pick(name: str, default: bool) -> bool:
            value = getattr(annotations, name, None)
            return default if value is None else bool(value)

        read_only = pick("read_only_hint", False)
        return cls(
            read_only=read_only,
            destructive=False if read_only else pick("destructive_hint", True),
            idempotent=True if read_only else pick("idempotent_hint", False),
            open_world=pick("open_world_hint", True),
        )


WORST_CASE = ToolHints(read_only=False, destructive=True, idempotent=False, open_world=True)
"""What the gateway assumes of an untrusted server's tool, whatever it claims: a side effect that
may destroy, must not be repeated and reaches the open world."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool of one configured MCP server."""

    server: str
    """The server's name in the user's `mcpServers` config (never the server's self-reported name)."""
    name: str
    """The tool's name on its server."""
    description: str
    input_schema: dict[str, Any]
    hints: ToolHints = field(default_factory=ToolHints)
    """What the gateway relies on (policy defaults, ledger, write lock, waves, retries, recovery):
    the server's annotations when it is trusted, `WORST_CASE` otherwise. Given the annotations;
    `__post_init__` replaces them for an untrusted server and keeps them in `claimed_hints`."""
    trusted: bool = False
    """Whether the server is trusted: only a trusted server's hints are relied on."""
    trusted_output: bool = False
    """Whether the servers file marks this server's results trusted: reading them does not taint the run."""
    root: str | None = None
    """The directory on this host the server resolves relative paths against; None when unknown."""
    declared_paths: tuple[str, ...] | None = None
    """Arguments the servers file declares as paths for this tool (names, or JSON pointers with `*`);
    None when it declares none for the server."""
    output_schema: dict[str, Any] = field(default_factory=dict)
    """The JSON schema the server declares for the tool's structured result (empty when it declares none)."""
    claimed_hints: ToolHints = field(init=False)
    """What the server's annotations say, relied on or not (shown to people, never to decide)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "claimed_hints", self.hints)
        if not self.trusted:
            object.__setattr__(self, "hints", replace(WORST_CASE, annotated=self.hints.annotated))

    def trusting(self) -> "ToolSpec":
        """This tool with its server trusted (trust granted by the policy rather than the config)."""
        return self if self.trusted else replace(self, trusted=True, hints=self.claimed_hints)

    @property
    def qualified_name(self) -> str:
        return qualified_name(self.server, self.name)

    def for_model(self) -> dict[str, Any]:
        """The OpenAI-style function schema the model is offered."""
        return {
            "type": "function",
            "function": {
                "name": self.qualified_name,
                "description": self.description or self.name,
                "parameters": self.input_schema or {"type": "object", "properties": {}},
            },
        }


class ToolRegistry:
    """Every tool of a run, addressable by qualified name."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._by_name: dict[str, ToolSpec] = {}
        for spec in specs:
            self._by_name[spec.qualified_name] = spec

    def get(self, name: str) -> ToolSpec | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def specs(self) -> list[ToolSpec]:
        return [self._by_name[name] for name in self.names()]

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name
