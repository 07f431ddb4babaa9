"""grounding_audit: the "observation grounding rate" of one run, judged again after the run from
what the servers and the tool layer left behind, not from the grounding step's own marks.

A plan step marked done with tools is a state update that claims progress. It is verified when,
for each tool it expects (or for its evidence call), one of the run's calls for that step:
- ended ok, and the result recorded is whole: its hash is that of the stored payload's body (a
  result cut for the model) or of the excerpt the observation kept (a result that fit);
- had a side effect only with a COMPLETE row in the write-ahead ledger (finished, not merely
  intended or aborted);
- still meets its post-condition, re-checked on the workspace: a file a call wrote hashes to what
  the server reported writing in its ledger row; a file a call read is in the result the run saw
  (either unless a later write of the run may have changed it, or the run's rollback undid it).
The `grounded` flag, the `verified` map and the stage the grounding step sets are not read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.store import get_call_payload, run_ledger

WRITES = ("write_file", "edit_file")
"""Tools (by name ending) whose post-condition is the file the server reported writing."""
READS = ("read_file",)
"""Tools (by name ending) whose post-condition is the file's text in the result."""


@dataclass(frozen=True)
class StepVerdict:
    """One done tool step of a run: whether the audit found it verified, and why not."""

    step_id: str
    verified: bool
    why: str = ""


async def audit_grounding(pool: AsyncConnectionPool, run_id: str, state: Mapping[str, Any], workspace: Path | None,
                          events: Sequence[Mapping[str, Any]] = ()) -> list[StepVerdict]:
    """A verdict per plan step marked done that expects tools (none when the plan has none).
    `events`, the run's trace: a call its `compensation` events name was undone by the run's own
    rollback, so its file is not re-checked."""
    steps = [step for step in (state.get("plan") or {}).get("steps") or [] if step.get("status") == "done" and step.get("tools")]
    if not steps:
        return []
    observations: list[Mapping[str, Any]] = state.get("observations") or []
    ledger = {entry.call_id: (entry.status, entry.result) for entry in await run_ledger(pool, run_id)}
    args = _arguments(state)
    undone = {str(item.get("call_id")) for event in events if event.get("kind") == "compensation"
              for item in (event.get("data") or {}).get("outcomes") or []}
    shown = {str(message.tool_call_id): message.content for message in state.get("messages") or []
             if isinstance(getattr(message, "tool_call_id", None), str) and isinstance(getattr(message, "content", None), str)}
    verdicts = []
    for step in steps:
        own = [obs for obs in observations if obs.get("step_id") == step["id"]]
        evidence = [obs for obs in observations if obs.get("call_id") == f"r.{step['id']}"]
        problems: list[str] = []
        if evidence and await _verified(pool, run_id, evidence[0], ledger, args, shown, observations, workspace, problems):
            verdicts.append(StepVerdict(step["id"], True))
            continue
        missing = []
        for tool in step["tools"]:
            verified = [await _verified(pool, run_id, obs, ledger, args, shown, observations,
                                        None if obs.get("call_id") in undone else workspace, problems)
                        for obs in own if _names(obs, tool)]
            if not any(verified):
                missing.append(tool)
        verdicts.append(StepVerdict(step["id"], True) if not missing else
                        StepVerdict(step["id"], False, "; ".join(problems) or f"no call of {missing} for the step"))
    return verdicts


def _names(obs: Mapping[str, Any], tool: str) -> bool:
    return tool in (obs.get("tool"), obs.get("name"), f"{obs.get('server')}__{obs.get('tool')}")


def _arguments(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each call's arguments by tool call id: as the model proposed them, or as a person edited them."""
    found: dict[str, dict[str, Any]] = {}
    for message in state.get("messages") or []:
        for call in getattr(message, "tool_calls", None) or []:
            if call.get("id"):
                found[call["id"]] = dict(call.get("args") or {})
    for approval in state.get("approvals") or []:
        if approval.get("decision") == "edit" and approval.get("tool_call_id") and isinstance(approval.get("args"), dict):
            found[approval["tool_call_id"]] = approval["args"]
    return found


async def _verified(pool: AsyncConnectionPool, run_id: str, obs: Mapping[str, Any], ledger: Mapping[str, tuple[str, Any]],
                    args: Mapping[str, dict[str, Any]], shown: Mapping[str, str], observations: Sequence[Mapping[str, Any]], workspace: Path | None,
                    problems: list[str]) -> bool:
    call = obs.get("call_id", "?")
    if obs.get("status") != "ok":
        problems.append(f"{call} ended {obs.get('status')}")
        return False
    text = await _result(pool, run_id, obs, shown)
    if text is None:
        problems.append(f"{call}: the result recorded is not whole (no stored payload or excerpt with the hash the observation recorded)")
        return False
    status, reported = ledger.get(call, (None, None))
    if obs.get("side_effect") and status != "COMPLETE":
        problems.append(f"{call}: a side effect without a COMPLETE ledger row ({status or 'no row'})")
        return False
    if not _postcondition_holds(obs, text, reported, args.get(obs.get("tool_call_id") or "", {}), observations, workspace):
        problems.append(f"{call}: the workspace file it wrote or read does not hold what its result says")
        return False
    return True


async def _result(pool: AsyncConnectionPool, run_id: str, obs: Mapping[str, Any], shown: Mapping[str, str]) -> str | None:
    """The whole result the run saw (the stored payload of a result cut for the model, else the
    excerpt or the tool message the model got), when one of them hashes to what the observation
    recorded; else None."""
    texts = [obs.get("excerpt"), shown.get(obs.get("tool_call_id") or "")]
    if obs.get("pointer"):
        payload = await get_call_payload(pool, run_id, obs["call_id"])
        texts = [payload.body if payload is not None else None]
    return next((text for text in texts if isinstance(text, str) and hashlib.sha256(text.encode()).hexdigest() == obs.get("sha256")), None)


def _postcondition_holds(obs: Mapping[str, Any], text: str, reported: Any, args: Mapping[str, Any],
                         observations: Sequence[Mapping[str, Any]], workspace: Path | None) -> bool:
    """A written file hashes to what the server reported writing; a read file's text is in the
    result. Nothing to re-check (true): another tool, no workspace, a path outside it, or a
    later write of the run."""
    tool = str(obs.get("tool") or "")
    written = _server_report(reported) if tool.endswith(WRITES) else {}
    path = written.get("path") if tool.endswith(WRITES) else args.get("path")
    if workspace is None or not isinstance(path, str) or not tool.endswith(WRITES + READS):
        return True
    target = (workspace / path).resolve()
    if not target.is_relative_to(workspace.resolve()) or _written_later(obs, observations):
        return True
    try:
        current = target.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if tool.endswith(WRITES):
        expected = written.get("sha256")
        return isinstance(expected, str) and hashlib.sha256(current.encode()).hexdigest() == expected
    return current in text or json.dumps(current)[1:-1] in text


def _server_report(result: Any) -> dict[str, Any]:
    """What the server said it wrote, from its ledger row (its structured result, or its text as JSON)."""
    if not isinstance(result, dict):
        return {}
    for candidate in (result, result.get("structured"), result.get("structured_content")):
        if isinstance(candidate, dict) and "sha256" in candidate:
            return candidate
    try:
        parsed = json.loads(result.get("text") or "")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _written_later(obs: Mapping[str, Any], observations: Sequence[Mapping[str, Any]]) -> bool:
    """A later call of the run wrote a file (which one its record does not say): the path may have changed since."""
    position = next((index for index, item in enumerate(observations) if item is obs), len(observations))
    return any(str(item.get("tool") or "").endswith(WRITES) and item.get("status") == "ok" for item in observations[position + 1:])
