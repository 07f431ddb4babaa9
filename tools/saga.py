"""saga: how far a tool's effect can be undone, and the calls that undo a run's effects.

Owns the reversibility class of a tool (pure, reversible, compensable, irreversible), the compensating call for
each write of our shipped servers (workspace, records), and running those calls in reverse
order. Never decides when to roll back and never records anything: the loop calls `compensate`
on failure and puts the returned outcomes in its trace. A side effect sent but never answered
has no compensation (what it changed is unknown): `unanswered` words its manual-check line.

Classes, first match wins:
    config override (`{"workspace__write_file": "reversible"}`)   → as configured
    read-only, from a trusted server                               → pure
    a write whose compensation we know (signature of our servers)  → compensable
    anything else                                                  → irreversible
Known writes are compensable, not reversible: the compensation restores the data but not all
of the state (a record's version and timestamps move on, a file gets a new mtime): the state after is
only close to the state before. An idempotent but destructive tool whose undo we cannot describe (a sandbox command, a
third-party `write_file` that does not return what it replaced) is irreversible: we cannot undo
what we cannot describe. An untrusted read-only claim does not make a tool pure, since an
unchecked claim may not relax anything (as in policy.py and dispatch.py); it stays irreversible
unless the user overrides it.

A write or move that made parent directories reports them (`created_directories`); its
compensation removes them again, deepest first, each only while empty: a directory that existed
before is never named, and one that now holds anything the compensation did not remove (a file
the run did not create) stays.

Every compensation is safe to replay, since a crash can stop a rollback halfway. Writes that take an idempotency key get
`comp:<key of the forward call>`, so a replay returns the first response and changes nothing;
a compensating delete treats "already absent" as done (`already_compensated`). Moving a file
back takes no key: a replay finds nothing to move and changes nothing, but reports `failed`,
since "gone from where it was moved" does not prove "back where it came from".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence, TypedDict, get_args

from boundloop.tools.dispatch import CallsTools
from boundloop.tools.errors import BridgeError, ConfigError
from boundloop.tools.registry import ToolSpec, qualified_name

Reversibility = Literal["pure", "reversible", "compensable", "irreversible"]
CompensationStatus = Literal["ok", "already_compensated", "failed", "manual_action_required"]

KEY_ARGUMENT = "idempotency_key"
KEY_PREFIX = "comp:"
_MAX_KEY_CHARS = 200
"""The records server accepts idempotency keys of at most 200 characters."""

BAD_OVERRIDE = "reversibility override for {tool!r} is {value!r}; use one of {allowed}"
ALREADY_DONE = "{description}: already done ({evidence})"
FAILED = "{description} failed ({status}): {text} The effect of call {call_id} may still be in place; check it and undo it by hand."
MANUAL_ACTION = "{tool} {why}; undo call {call_id} by hand (it ran with the arguments shown)."
WHY_UNKNOWN = "is irreversible: no compensating call is known for it"
WHY_CONFIGURED = "is configured as irreversible"
WHY_PROVIDER = "was run by the model's provider (a hosted tool) and is irreversible as far as we know"
WHY_CLAIMED = "is configured as {kind}, but no compensating call is known for it"
WHY_NO_RECORD = "returned no record of what it changed, so no compensating call can be built"
UNANSWERED = (
    "{tool} was sent but never answered (its ledger entry is an INTENT without outcome), so whether it took "
    "effect is unknown; check call {call_id} and undo it by hand if it did."
)

# Text of the workspace's and the records server's "not found" errors. A delete that finds
# nothing has reached the state it asserts, so a replayed delete is done, not failed.
_FILE_ABSENT = "path {path!r}: No such file or directory"
_RECORD_ABSENT = "record {id!r} not found in collection {collection!r}"


@dataclass(frozen=True)
class Compensation:
    """The call that undoes one effect, on the server that made it."""

    tool: str
    """The MCP tool name on the effect's server (not the qualified name)."""
    arguments: dict[str, Any]
    description: str
    """What the call does, for the trace and the failure report."""
    already_done_if: str | None = None
    """Error text meaning the state this call restores already holds (e.g. the file is already gone)."""


@dataclass(frozen=True)
class Effect:
    """One side-effecting call that completed, as the loop hands it to the saga."""

    call_id: str
    spec: ToolSpec
    arguments: dict[str, Any]
    structured: Any
    """The call's structured result: what our servers' writes replaced or removed."""
    key: str
    """The call's idempotency key (tools/ledger.py); its compensation's key derives from it."""


class CompensationOutcome(TypedDict):
    """One line of the rollback report: a compensating call and how it ended, or a manual step."""

    call_id: str
    tool: str
    """Qualified name of the compensating call (for manual_action_required: of the call to undo)."""
    arguments: dict[str, Any]
    status: CompensationStatus
    detail: str


def reversibility(spec: ToolSpec, overrides: Mapping[str, str] | None = None) -> Reversibility:
    """The class of `spec`; `overrides` maps qualified tool names to a class and wins."""
    override = (overrides or {}).get(spec.qualified_name)
    if override is not None:
        if override not in get_args(Reversibility):
            allowed = ", ".join(get_args(Reversibility))
            raise ConfigError(BAD_OVERRIDE.format(tool=spec.qualified_name, value=override, allowed=allowed))
        return override  # type: ignore[return-value]
    if spec.hints.read_only and spec.trusted:
        return "pure"
    return "compensable" if _undo_of(spec) is not None else "irreversible"


def compensation_for(spec: ToolSpec, arguments: dict[str, Any], structured: Any, key: str) -> Compensation | None:
    """The call that undoes `spec(arguments)` given its structured result; None if we cannot describe one.

    `key` is the forward call's idempotency key; keyed compensating writes use `comp:<key>`.
    """
    undo = _undo_of(spec)
    if undo is None or not isinstance(structured, dict):
        return None
    return undo.build(arguments, structured, _compensation_key(key))


def plan_compensations(
    effects: Sequence[Effect], *, overrides: Mapping[str, str] | None = None
) -> tuple[list[tuple[Effect, Compensation]], list[Effect]]:
    """The compensations of `effects`, last effect first, and the effects that have none (manual action).

    Pure effects need neither and appear in neither list.
    """
    steps = _reverse_plan(effects, overrides)
    return [(e, c) for e, c, _ in steps if c is not None], [e for e, c, _ in steps if c is None]


async def compensate(
    bridge: CallsTools, effects: Sequence[Effect], *, timeout_s: float, overrides: Mapping[str, str] | None = None
) -> list[CompensationOutcome]:
    """Run the compensations of `effects` one at a time, last effect first, and report each.

    A failure does not stop the rest. Effects without a compensation are reported, in their place
    in the reverse order, as `manual_action_required`. Safe to run again on the same effects.
    """
    report: list[CompensationOutcome] = []
    for effect, compensation, why in _reverse_plan(effects, overrides):
        if compensation is None:
            detail = MANUAL_ACTION.format(tool=effect.spec.qualified_name, why=why, call_id=effect.call_id)
            report.append(_line(effect, effect.spec.name, effect.arguments, "manual_action_required", detail))
            continue
        status, detail = await _run(bridge, effect, compensation, timeout_s)
        report.append(_line(effect, compensation.tool, compensation.arguments, status, detail))
    return report


def provider_run(call_id: str, tool: str, arguments: dict[str, Any]) -> CompensationOutcome:
    """The rollback line of a side effect a provider-hosted tool made: irreversible, a person must undo it."""
    return CompensationOutcome(call_id=call_id, tool=tool, arguments=arguments, status="manual_action_required",
                               detail=MANUAL_ACTION.format(tool=tool, why=WHY_PROVIDER, call_id=call_id))


def unanswered(call_id: str, tool: str) -> CompensationOutcome:
    """The rollback line of a side effect that was sent and never answered: nothing to run (there
    is no record of what it changed, nor proof that it changed anything), a person must check."""
    return CompensationOutcome(call_id=call_id, tool=tool, arguments={}, status="manual_action_required",
                               detail=UNANSWERED.format(tool=tool, call_id=call_id))


# -- running ---------------------------------------------------------------------------------


def _reverse_plan(
    effects: Sequence[Effect], overrides: Mapping[str, str] | None
) -> list[tuple[Effect, Compensation | None, str]]:
    """Every non-pure effect, last first, with its compensation, or None and why there is none."""
    steps: list[tuple[Effect, Compensation | None, str]] = []
    for effect in reversed(effects):
        kind = reversibility(effect.spec, overrides)
        if kind == "pure":
            continue
        if kind == "irreversible":
            configured = effect.spec.qualified_name in (overrides or {})
            steps.append((effect, None, WHY_CONFIGURED if configured else WHY_UNKNOWN))
            continue
        compensation = compensation_for(effect.spec, effect.arguments, effect.structured, effect.key)
        if compensation is not None:
            steps.append((effect, compensation, ""))
        else:
            known = _undo_of(effect.spec) is not None
            steps.append((effect, None, WHY_NO_RECORD if known else WHY_CLAIMED.format(kind=kind)))
    return steps


async def _run(
    bridge: CallsTools, effect: Effect, compensation: Compensation, timeout_s: float
) -> tuple[CompensationStatus, str]:
    try:
        outcome = await bridge.call(effect.spec.server, compensation.tool, compensation.arguments, timeout_s=timeout_s)
    except BridgeError as exc:  # e.g. the server is not in this bridge: report it, run the rest
        return "failed", FAILED.format(
            description=compensation.description, status="bridge_error", text=f"{exc}.", call_id=effect.call_id
        )
    if outcome.ok:
        return "ok", compensation.description
    evidence = compensation.already_done_if
    if outcome.status == "tool_error" and evidence is not None and evidence in outcome.text:
        return "already_compensated", ALREADY_DONE.format(description=compensation.description, evidence=evidence)
    text = (outcome.text or outcome.detail).rstrip(".") + "."
    return "failed", FAILED.format(
        description=compensation.description, status=outcome.status, text=text, call_id=effect.call_id
    )


def _line(
    effect: Effect, tool: str, arguments: dict[str, Any], status: CompensationStatus, detail: str
) -> CompensationOutcome:
    return CompensationOutcome(
        call_id=effect.call_id,
        tool=qualified_name(effect.spec.server, tool),
        arguments=arguments,
        status=status,
        detail=detail,
    )


def _compensation_key(key: str) -> str:
    # Deterministic, so a replay after a crash presents the same key; hashed when the forward key
    # is so long that the prefixed key would exceed what the records server accepts.
    composed = KEY_PREFIX + key
    return composed if len(composed) <= _MAX_KEY_CHARS else KEY_PREFIX + hashlib.sha256(key.encode()).hexdigest()


# -- the compensations of our shipped servers -------------------------------------------------


@dataclass(frozen=True)
class _Undo:
    parameters: frozenset[str]
    """Input parameters that identify the tool as ours, whatever the server is called in the config."""
    build: Callable[[dict[str, Any], dict[str, Any], str], Compensation | None]
    """(forward arguments, structured result, compensation key) → the compensating call."""


def _undo_of(spec: ToolSpec) -> _Undo | None:
    undo = _UNDO.get(spec.name)
    properties = (spec.input_schema or {}).get("properties") or {}
    if undo is None or spec.hints.read_only or not undo.parameters <= properties.keys():
        return None
    return undo


def _has(result: dict[str, Any], *fields: str) -> bool:
    return all(field in result for field in fields)


def _restore_file(path: str, content: str, key: str, what: str) -> Compensation:
    return Compensation("write_file", {"path": path, "content": content, KEY_ARGUMENT: key}, f"restore {path!r} {what}")


def _undo_write_file(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    if not _has(result, "path", "previous_content"):
        return None
    path, previous = result["path"], result["previous_content"]
    if previous is None:
        return Compensation(
            "delete_file", {"path": path, **_prune(result)}, f"delete {path!r}, created by write_file{_and_dirs(result)}",
            _FILE_ABSENT.format(path=path),
        )
    return _restore_file(path, previous, key, "as it was before write_file")


def _undo_edit_file(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    if not _has(result, "path", "previous_content"):
        return None
    return _restore_file(result["path"], result["previous_content"], key, "as it was before edit_file")


def _undo_delete_file(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    if not _has(result, "path", "deleted_content"):
        return None
    return _restore_file(result["path"], result["deleted_content"], key, "deleted by delete_file")


def _undo_move_file(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    # move_file takes no key and never overwrites. A replay whose moved path is gone fails rather
    # than passing as done: "gone" does not prove "back at its source".
    if not _has(result, "source", "destination"):
        return None
    source, destination = result["source"], result["destination"]
    return Compensation(
        "move_file", {"source": destination, "destination": source, **_prune(result)},
        f"move {destination!r} back to {source!r}{_and_dirs(result)}",
    )


def _prune(result: dict[str, Any]) -> dict[str, Any]:
    """The `prune` argument removing the directories a write or move made, where they are empty."""
    made = result.get("created_directories") or []
    return {"prune": made[::-1]} if made else {}


def _and_dirs(result: dict[str, Any]) -> str:
    made = result.get("created_directories") or []
    return f", and the directories it made where empty ({', '.join(map(repr, made))})" if made else ""


def _undo_create_record(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    if not _has(result, "collection", "id", "data"):
        return None
    collection, record_id = result["collection"], result["id"]
    return Compensation(
        "delete_record",
        {"collection": collection, "id": record_id, KEY_ARGUMENT: key},
        f"delete record {record_id!r} of {collection!r}, created by create_record",
        _RECORD_ABSENT.format(id=record_id, collection=collection),
    )


def _undo_update_record(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    previous, record = result.get("previous"), result.get("record")
    if not (isinstance(previous, dict) and isinstance(record, dict) and _has(previous, "collection", "id", "data")):
        return None
    patch = _restoring_patch(record.get("data"), previous["data"])
    if patch is None:
        return None
    collection, record_id = previous["collection"], previous["id"]
    return Compensation(
        "update_record",
        {"collection": collection, "id": record_id, "data": patch, KEY_ARGUMENT: key},
        f"restore record {record_id!r} of {collection!r} as it was before update_record",
    )


def _undo_delete_record(arguments: dict[str, Any], result: dict[str, Any], key: str) -> Compensation | None:
    deleted = result.get("deleted")
    if not (isinstance(deleted, dict) and _has(deleted, "collection", "id", "data")):
        return None
    collection, record_id = deleted["collection"], deleted["id"]
    return Compensation(
        "create_record",
        {"collection": collection, "id": record_id, "data": deleted["data"], KEY_ARGUMENT: key},
        f"recreate record {record_id!r} of {collection!r}, deleted by delete_record",
    )


def _restoring_patch(after: Any, before: Any) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) that turns `after` back into `before`, touching only what differs.

    Keys the update added become null (null removes); changed objects are patched recursively,
    because a merge patch merges objects rather than replacing them. None when a changed value
    holds a null: a merge patch cannot write one, so the restore cannot be described.
    """
    if not isinstance(after, dict) or not isinstance(before, dict):
        return None
    patch: dict[str, Any] = {key: None for key in after if key not in before}
    for key, value in before.items():
        if key in after and after[key] == value:
            continue
        if isinstance(value, dict) and isinstance(after.get(key), dict):
            nested = _restoring_patch(after[key], value)
        else:
            nested = None if _holds_null(value) else value
        if nested is None:
            return None
        patch[key] = nested
    return patch


def _holds_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_holds_null(item) for item in value.values())
    return False  # lists and scalars are replaced whole, nulls inside a list included


_UNDO: dict[str, _Undo] = {
    "write_file": _Undo(frozenset({"path", "content", KEY_ARGUMENT}), _undo_write_file),
    "edit_file": _Undo(frozenset({"path", "old", "new"}), _undo_edit_file),
    "delete_file": _Undo(frozenset({"path"}), _undo_delete_file),
    "move_file": _Undo(frozenset({"source", "destination"}), _undo_move_file),
    "create_record": _Undo(frozenset({"collection", "data", "id", KEY_ARGUMENT}), _undo_create_record),
    "update_record": _Undo(frozenset({"collection", "id", "data", KEY_ARGUMENT}), _undo_update_record),
    "delete_record": _Undo(frozenset({"collection", "id", KEY_ARGUMENT}), _undo_delete_record),
}
