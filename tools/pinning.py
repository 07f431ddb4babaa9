"""pinning: the tool definitions a run was given at intake, and the check at dispatch that a server
still defines a tool that way (the rug-pull defence).

Intake pins every tool as its server listed it then. `pin(specs)` is the JSON the run keeps in
its checkpointed state, once: `{"version": <registry hash>, "specs": [<ToolSpec fields>, "sha256":
<definition hash>]}`. Every later step builds the run's registry from it (`registry_of`), in any
process and without a live server, so a tool a server adds mid-run is never offered, and a
description a server rewrites never reaches the model. Just before a call is dispatched,
`changed()` asks the server for its tools again and compares the tool's definition (name,
description, input schema, annotations) with the pinned one: a different or missing definition
refuses the call with `tool_changed`, and a server that cannot list its tools gets no call. A
read-only call to a trusted server may be checked against that server's last listing while the
server's own freshness hint says it stands (tools/fresh_listing.py); a call with side effects is
always checked against a listing asked for it, so a dead server refuses it unsent, and so is a
read that vouches for what the run did (observe's read-back of a write, verify's checks). A retry is
checked again (`RecheckedRetries`): the attempt before it may have restarted the server.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import Any, Iterable, Protocol

from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolHints, ToolRegistry, ToolSpec, qualified_name

# Model-facing texts: the model reads them as tool results, so each says what happened and what it can do instead.
TOOL_CHANGED = (
    "tool_changed: {tool} was not run: MCP server {server!r} {what} since this run started, so it is no longer "
    "the tool this run was given. Continue without it, or report that the tool changed; a new run gets the new definition."
)
NOT_PINNED = "unknown_tool: {tool} was not among the tools this run started with, so it is not run."
UNCONFIRMED = (
    "server_unavailable: {tool} was not run: MCP server {server!r} did not list its tools, so the tool's definition "
    "could not be checked against the one this run started with. Continue with other tools."
)
LIST_TIMEOUT_S = 10.0
"""How long the listing before a call may take: a control request, bounded apart from the tool's own timeout."""
_SPEC_FIELDS = frozenset(field.name for field in dataclasses.fields(ToolSpec) if field.init)


class ListsTools(Protocol):
    """What the check needs of the bridge (MCPBridge fits)."""

    async def current_specs(self, server: str, *, timeout_s: float, standing: bool = False) -> list[ToolSpec] | None: ...


class PinnedCalls:
    """A bridge that sends a call only for a pinned tool its server still defines as pinned
    (for callers that dispatch many calls through one object, such as the saga's compensations)."""

    def __init__(self, bridge: Any, registry: ToolRegistry) -> None:
        self._bridge = bridge
        self._registry = registry

    async def call(self, server: str, tool: str, arguments: dict[str, Any] | None, *, timeout_s: float,
                   on_progress: Any = None) -> CallOutcome:
        spec = self._registry.get(qualified_name(server, tool))
        if spec is None:
            return CallOutcome("unknown_tool", text=NOT_PINNED.format(tool=qualified_name(server, tool)), detail="not pinned at intake")
        if refusal := await changed(self._bridge, spec):
            return refusal
        return await self._bridge.call(server, tool, arguments, timeout_s=timeout_s, on_progress=on_progress)


class RecheckedRetries:
    """The bridge for one call's attempts (dispatch.call_with_retry, and the ledger's re-sends):
    the caller checked the first; each later one is checked again, because the attempt before it
    may have found the server dead and restarted it, and the new process may define the tool otherwise."""

    def __init__(self, bridge: Any, spec: ToolSpec, *, vouches: bool = False) -> None:
        self._bridge = bridge
        self._spec = spec
        self._vouches = vouches
        self._attempted = False

    async def call(self, server: str, tool: str, arguments: dict[str, Any] | None, *, timeout_s: float,
                   on_progress: Any = None) -> CallOutcome:
        if self._attempted and (refusal := await changed(self._bridge, self._spec, vouches=self._vouches)):
            return refusal
        self._attempted = True
        return await self._bridge.call(server, tool, arguments, timeout_s=timeout_s, on_progress=on_progress)


def definition_hash(spec: ToolSpec) -> str:
    """SHA-256 of what the server says the tool is: name, description, input schema, annotations."""
    return _sha256({"name": spec.name, "description": spec.description, "input_schema": spec.input_schema,
                    "hints": _copied(spec.claimed_hints)})


def pin(specs: Iterable[ToolSpec]) -> dict[str, Any]:
    """The run's tools as checkpointed JSON, with the registry version (a hash of all of it)."""
    entries = [{**_fields(spec), "sha256": definition_hash(spec)}
               for spec in sorted(specs, key=lambda spec: spec.qualified_name)]
    return {"version": _sha256(entries), "specs": entries}


def same_tools(pinned: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two pins define the same tools, compared on the definitions themselves (as JSON), not
    on the version either one carries."""
    return json.dumps(pinned["specs"], sort_keys=True) == json.dumps(other["specs"], sort_keys=True)


def registry_of(pinned: dict[str, Any]) -> ToolRegistry:
    return ToolRegistry(spec_of(entry) for entry in pinned["specs"])


def spec_of(entry: dict[str, Any]) -> ToolSpec:
    fields = {key: value for key, value in entry.items() if key in _SPEC_FIELDS}
    return ToolSpec(**{**fields, "hints": ToolHints(**fields["hints"])})


async def changed(bridge: ListsTools, spec: ToolSpec, *, timeout_s: float = LIST_TIMEOUT_S, vouches: bool = False) -> CallOutcome | None:
    """A refusal when the server no longer defines `spec` as pinned (or will not say); None when it
    does. `vouches`: the call vouches for what the run did (a write's read-back, a check of the
    result), so it is checked against a listing asked now, never against one that stands from before."""
    live = await bridge.current_specs(spec.server, timeout_s=timeout_s, standing=spec.hints.read_only and not vouches)
    if live is None:
        text = UNCONFIRMED.format(tool=spec.qualified_name, server=spec.server)
        return CallOutcome("server_unavailable", text=text, detail="tools/list failed before dispatch")
    current = next((candidate for candidate in live if candidate.name == spec.name), None)
    if current is None:
        what = "no longer lists the tool"
    elif definition_hash(current) != definition_hash(spec):
        parts = [label for label, pinned, now in (
            ("description", spec.description, current.description),
            ("input schema", spec.input_schema, current.input_schema),
            ("annotations", spec.claimed_hints, current.claimed_hints),
        ) if pinned != now]
        what = f"changed the tool's {' and '.join(parts)}"
    else:
        return None
    return CallOutcome("tool_changed", text=TOOL_CHANGED.format(tool=spec.qualified_name, server=spec.server, what=what),
                       detail=f"definition pinned at intake: sha256 {definition_hash(spec)[:12]}; the server {what}")


def _fields(spec: ToolSpec) -> dict[str, Any]:
    """What rebuilds `spec`: its constructor fields, with `hints` as the server gave them (relied-on
    hints are derived from trust again when it is rebuilt)."""
    return {name: _copied(spec.claimed_hints if name == "hints" else getattr(spec, name)) for name in _SPEC_FIELD_ORDER}


_SPEC_FIELD_ORDER = tuple(field.name for field in dataclasses.fields(ToolSpec) if field.init)


def _copied(value: Any) -> Any:
    """`dataclasses.asdict`'s copy of a field, without its `copy.deepcopy` of every string and number
    of a tool's input schema (most of the cost of pinning): containers are copied, dataclasses become
    dicts, and the immutable leaves of a JSON document are shared, as deepcopy shares them; anything
    else is deep-copied, as asdict does."""
    kind = type(value)
    if value is None or kind in _SHARED:
        return value
    if kind is dict:
        return {_copied(key): _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind is tuple:
        return tuple(_copied(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _copied(getattr(value, field.name)) for field in dataclasses.fields(value)}
    return copy.deepcopy(value)


_SHARED = frozenset({str, int, float, bool, bytes})


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
