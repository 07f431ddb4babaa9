"""breakers: the repeated-call breaker and the per-tool / per-server circuit breakers.

Owns two pure functions over a plain JSON-able dict that lives in checkpointed graph state:
`check` (before dispatch: refuse, warn, or pass) and `record` (after dispatch: the new state);
`recorded` is the part of the new state a node writes after its calls, `changes` the part of any
new state that differs, and `merge` the state's reducer that adds it (so a checkpoint keeps only
the entries a step changed, not every call the run ever made).
No objects, no clocks, no process memory: `now` is passed in as wall-clock seconds
(`time.time()`), so a cooldown keeps counting across an interrupt and a resume in another
process. Inputs are never mutated; `record` returns a new dict. Never dispatches anything.

State shape:
    {"calls":    {"<qualified tool>#<args hash>": <dispatched count>},
     "circuits": {"tool:<qualified tool>" | "server:<server>":
                      {"failures": <consecutive>, "opened_at": <now when opened> | null}},
     "progress": {"epoch": <side effects that succeeded>},
     "epochs":   {"<qualified tool>#<args hash>": <the epoch its count started in>}}

Repeated calls are keyed by tool and a hash of the canonical JSON of the arguments (sorted
keys), so `{"a":1,"b":2}` and `{"b":2,"a":1}` are one call. The 2nd identical call runs with a
warning for the model; the 3rd (`block_at`) is refused as `repeated_call`. A side effect that
succeeded is progress: the world a read sees may have changed, so a read's count starts again
after it (reading a file back after writing it is not a loop). A side-effecting call's own count
never starts again: the same write, over and over, is the loop the breaker is for. The epoch and
a key's starting epoch are written only once a run has made progress, so a run that only reads
keeps the two parts empty.

Circuits: closed → open after `failure_threshold` consecutive failures → half-open once
`cooldown_s` has passed (calls may probe) → closed on a success, open again (new cooldown) on a
failure. Which outcomes count: for the *tool* circuit, timeout, server_unavailable and
tool_error (the tool is not working, whatever the cause); for the *server* circuit only timeout
and server_unavailable (the transport is failing; a tool reporting a bad argument says nothing
about the server). Refusals before dispatch, cancellations and `unknown_after_crash` count for
neither, nor as a repeat; any other dispatched outcome is a success. The model has a circuit of
the same kind, `model:<model id>`, advanced per attempt by graph/models/calls.py (`record_circuit`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from boundloop.tools.outcome import REFUSED_BEFORE_DISPATCH
from boundloop.tools.registry import ToolSpec

CircuitState = Literal["closed", "open", "half_open"]

_TOOL_FAILURES = frozenset({"timeout", "server_unavailable", "tool_error"})
_SERVER_FAILURES = frozenset({"timeout", "server_unavailable"})
_NEUTRAL = REFUSED_BEFORE_DISPATCH | {"cancelled", "unknown_after_crash"}
_PARTS = ("calls", "circuits", "progress", "epochs")

# Model-facing texts.
REPEAT_WARNING = (
    "repeated_call warning: {tool} was already called {count} time(s) with these exact arguments. "
    "Use the earlier result or change the arguments; identical call number {block_at} will be refused."
)
REPEAT_REFUSED = (
    "repeated_call: {tool} was already called {count} times with these exact arguments, so this call was refused. "
    "Use the earlier result, change the arguments, or take another approach."
)
CIRCUIT_OPEN = (
    "circuit_open: {what} failed {failures} times in a row, so calls to it are paused for {remaining_s:.0f} s more. "
    "Use another tool meanwhile, or continue without it."
)


@dataclass(frozen=True)
class BreakerSettings:
    block_at: int = 3
    """The identical call number that is refused (the ones between the first and it are warned)."""
    failure_threshold: int = 3
    """Consecutive failures that open a circuit."""
    cooldown_s: float = 30.0
    """How long an open circuit refuses calls before it lets a probe through (half-open)."""


DEFAULT_SETTINGS = BreakerSettings()


@dataclass(frozen=True)
class Refusal:
    """Do not dispatch: the call ends as `status` with `text` for the model."""

    status: Literal["repeated_call", "circuit_open"]
    text: str


@dataclass(frozen=True)
class RepeatWarning:
    """Dispatch, and attach `text` to the outcome the model sees."""

    text: str


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the arguments (sorted keys, no whitespace)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check(
    state: Mapping[str, Any], spec: ToolSpec, arguments: Mapping[str, Any], now: float,
    settings: BreakerSettings = DEFAULT_SETTINGS,
) -> Refusal | RepeatWarning | None:
    """What the breakers say about dispatching this call now (pure; `state` may be empty)."""
    circuits = state.get("circuits", {})
    for key, what in ((_server_key(spec), f"MCP server {spec.server!r}"), (_tool_key(spec), spec.qualified_name)):
        circuit = circuits.get(key)
        if circuit is not None and _state_of(circuit, now, settings) == "open":
            remaining_s = circuit["opened_at"] + settings.cooldown_s - now
            text = CIRCUIT_OPEN.format(what=what, failures=circuit["failures"], remaining_s=max(remaining_s, 1.0))
            return Refusal("circuit_open", text)
    count = _count(lambda part, key: state.get(part, {}).get(key), _call_key(spec, arguments), spec)
    if count + 1 >= settings.block_at:
        return Refusal("repeated_call", REPEAT_REFUSED.format(tool=spec.qualified_name, count=count))
    if count >= 1:
        return RepeatWarning(REPEAT_WARNING.format(tool=spec.qualified_name, count=count, block_at=settings.block_at))
    return None


def record(
    state: Mapping[str, Any], spec: ToolSpec, arguments: Mapping[str, Any], status: str, now: float,
    settings: BreakerSettings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """The breaker state after a call to `spec` ended with `status` (a `CallStatus`)."""
    return merge(state, recorded(state, [(spec, arguments, status, now)], settings))


def recorded(
    state: Mapping[str, Any], ended: Iterable[tuple[ToolSpec, Mapping[str, Any], str, float]],
    settings: BreakerSettings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """The entries that the calls `ended` (spec, arguments, status, now), recorded in order, change:
    the delta a node writes. Reads only the entries those calls touch, so its cost does not grow
    with the distinct calls a run has made."""
    delta: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}

    def current(part: str, key: str) -> Any:
        return delta[part][key] if key in delta[part] else state.get(part, {}).get(key)

    for spec, arguments, status, now in ended:
        if status in _NEUTRAL:
            continue
        key = _call_key(spec, arguments)
        delta["calls"][key] = _count(current, key, spec) + 1
        epoch = _epoch(current)
        if spec.hints.read_only and epoch and (current("epochs", key) or 0) != epoch:
            delta["epochs"][key] = epoch
        if status == "ok" and not spec.hints.read_only:
            delta["progress"]["epoch"] = epoch + 1
        for circuit, failures in ((_tool_key(spec), _TOOL_FAILURES), (_server_key(spec), _SERVER_FAILURES)):
            delta["circuits"][circuit] = _advance(current("circuits", circuit), status in failures, now, settings)
    changed = {part: {key: value for key, value in entries.items() if state.get(part, {}).get(key) != value}
               for part, entries in delta.items()}
    return {part: entries for part, entries in changed.items() if entries}


def record_circuit(
    state: Mapping[str, Any], key: str, failed: bool, now: float, settings: BreakerSettings = DEFAULT_SETTINGS
) -> dict[str, Any]:
    """The breaker state after one outcome of circuit `key` (any circuit, e.g. `model:<id>`)."""
    circuits = dict(state.get("circuits", {}))
    circuits[key] = _advance(circuits.get(key), failed, now, settings)
    return {**state, "circuits": circuits}


def circuit_state(
    state: Mapping[str, Any], key: str, now: float, settings: BreakerSettings = DEFAULT_SETTINGS
) -> CircuitState:
    """The state of circuit `key` (`tool:<qualified name>` or `server:<name>`) at `now`."""
    circuit = state.get("circuits", {}).get(key)
    return "closed" if circuit is None else _state_of(circuit, now, settings)


def merge(current: Mapping[str, Any] | None, update: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reducer: `update`'s entries (a delta, or a whole state) over `current`'s, key by key."""
    return merged(current, [update])


def merged(current: Mapping[str, Any] | None, updates: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """`merge` of each update in turn, in one pass (a replay of many writes is not quadratic)."""
    folded = {part: dict((current or {}).get(part, {})) for part in _PARTS}
    for update in updates:
        for part in _PARTS:
            folded[part].update((update or {}).get(part, {}))
    return folded


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `after` that differ from `before`: the delta a node writes (`merge(before, it) == after`)."""
    delta = {part: {key: value for key, value in after.get(part, {}).items() if before.get(part, {}).get(key) != value}
             for part in _PARTS}
    return {part: entries for part, entries in delta.items() if entries}


def _advance(circuit: Mapping[str, Any] | None, failed: bool, now: float, settings: BreakerSettings) -> dict[str, Any]:
    if not failed:
        return {"failures": 0, "opened_at": None}
    previous = circuit or {"failures": 0, "opened_at": None}
    failures = previous["failures"] + 1
    was = _state_of(previous, now, settings)
    # A failed probe in half-open re-opens at once; in closed, the threshold decides; a failure
    # reported while open (a call that was already in flight) restarts the cooldown.
    opens = was != "closed" or failures >= settings.failure_threshold
    return {"failures": failures, "opened_at": now if opens else None}


def _state_of(circuit: Mapping[str, Any], now: float, settings: BreakerSettings) -> CircuitState:
    opened_at = circuit.get("opened_at")
    if opened_at is None:
        return "closed"
    return "open" if now < opened_at + settings.cooldown_s else "half_open"


Lookup = Callable[[str, str], Any]
"""(part, key) → the entry, or None."""


def _epoch(lookup: Lookup) -> int:
    return lookup("progress", "epoch") or 0


def _count(lookup: Lookup, key: str, spec: ToolSpec) -> int:
    """Identical calls so far: for a read, only those made since the last side effect that succeeded."""
    if spec.hints.read_only and (lookup("epochs", key) or 0) != _epoch(lookup):
        return 0
    return lookup("calls", key) or 0


def _call_key(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    return f"{spec.qualified_name}#{arguments_hash(arguments)[:16]}"


def _tool_key(spec: ToolSpec) -> str:
    return f"tool:{spec.qualified_name}"


def _server_key(spec: ToolSpec) -> str:
    return f"server:{spec.server}"
