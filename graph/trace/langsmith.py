"""langsmith_trace: a run as one LangSmith tree, when LANGSMITH_TRACING=true (off by default).

The tree: a `boundloop.run` root (metadata: run id, profile, policy hash, graph version, budget
limits, terminal code, confidence; tags: profile, status) → one `boundloop.drive` per time a
process drove the run (the first, and each resume: after an approval, a crash, a cancel) →
LangGraph's runs of each phase → the model calls (LangChain's own runs, with the role in their
metadata) and each tool call as a `tool` run (server, tool, decision, rule, ledger key, outcome, the
policy hash, the budget's limits and what was spent when it was made): the calls `execute` sent, and
the ones a phase made or refused itself (evidence reads, checks, denials). The root and each drive
carry what the run had spent at their end beside the budget's limits.
Approvals, escalations and interrupts are events on the run of the node that made them.

The root's id and start time are kept in Postgres (`boundloop_langsmith_roots`), so a drive in
any process, days later, nests under the same root; the root is posted by the first drive and
closed by the drive that ends the run (until then LangSmith shows it as running). Off, nothing
here imports langsmith or sends anything.

LangSmith never holds a run up: its client sends from a daemon thread with short HTTP timeouts, and
a drive waits at most FLUSH_TIMEOUT_S at its end for the runs to go out. An endpoint that errors or
hangs loses (part of) that drive's tree — the root stays open, as if the run were still going — but
the run ends, and the process exits, as it would untraced.
"""

from __future__ import annotations

import os
import uuid
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable, Iterator

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import store

Finish = Callable[[dict[str, Any]], None]

FLUSH_TIMEOUT_S = 5.0
"""How long the end of a drive waits for LangSmith to take its runs."""
HTTP_TIMEOUT_MS = (2_000, 5_000)
"""(connect, read) per request to LangSmith; the client's own default waits a minute for an answer."""


def enabled() -> bool:
    return os.environ.get("LANGSMITH_TRACING", "").strip().lower() == "true"


@asynccontextmanager
async def run_root(run_id: str, known: dict[str, Any], graph_version: str, pool: AsyncConnectionPool) -> AsyncIterator[Finish]:
    """Wrap one drive of a run; call the yielded `finish(state)` with the state it reached."""
    if not enabled():
        yield lambda state: None
        return
    client = _client()
    import langsmith
    from langsmith.run_trees import RunTree

    boundary = known.get("boundary") or {}
    profile = boundary.get("profile") or (known.get("task") or {}).get("profile") or "unknown"
    metadata = {"run_id": run_id, "profile": profile, "graph_version": graph_version, "policy_hash": boundary.get("policy_hash"),
                "budget_limits": known.get("budget")}
    metadata = {key: value for key, value in metadata.items() if value is not None}  # the runs below inherit it: no None over their own
    tags = ["boundloop", f"profile:{profile}"]
    root_id, started_at, first = await store.langsmith_root(pool, run_id, uuid.uuid4(), datetime.now(timezone.utc))
    root = RunTree(id=root_id, name="boundloop.run", run_type="chain", start_time=started_at.astimezone(timezone.utc),
                   inputs={"run_id": run_id, "goal": (known.get("task") or {}).get("goal")}, extra={"metadata": metadata}, tags=tags)
    if first:
        root.post()
    async with langsmith.trace("boundloop.drive", run_type="chain", inputs={"run_id": run_id}, metadata=metadata, tags=tags,
                               parent=root) as drive:

        def finish(state: dict[str, Any]) -> None:
            status = (state.get("status") or {}).get("terminal") or "waiting"
            drive.add_metadata({"terminal_code": status, "budget_used": _spent(state.get("usage"))})
            drive.add_tags([f"status:{status}"])
            drive.end(outputs={"status": status})
            if status == "waiting":
                return  # the root stays open until a drive ends the run
            boundary = state.get("boundary") or {}
            root.add_metadata({"terminal_code": status, "confidence": (state.get("result") or {}).get("confidence"),
                               "policy_hash": boundary.get("policy_hash") or metadata.get("policy_hash"),
                               "budget_limits": state.get("budget") or metadata.get("budget_limits"), "budget_used": _spent(state.get("usage"))})
            root.add_tags([f"status:{status}"])
            root.end(outputs={"status": status, "result": state.get("result")})
            root.patch(exclude_inputs=True)  # the first drive posted them

        yield finish
    client.flush(timeout=FLUSH_TIMEOUT_S)  # a process that exits right after must not lose the root's final patch


def _client() -> Any:
    """The process's LangSmith client (the one LangChain's tracer uses too), made before anything is traced."""
    # Its sending thread is a daemon: a process whose endpoint hangs exits once the flush gave up.
    os.environ.setdefault("LANGSMITH_USE_DAEMON", "true")
    from langsmith.run_trees import get_cached_client

    return get_cached_client(timeout_ms=HTTP_TIMEOUT_MS)


@contextmanager
def tool_run(payload: dict[str, Any]) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """A tool call as a `tool` run under its node's run; call the yielded function with the call's trace records."""
    if not enabled():
        yield lambda calls: None
        return
    import langsmith

    call = payload.get("call") or {}
    metadata = {"server": call.get("server"), "tool": call.get("name"), "decision": call.get("decision") or ("approved" if call.get("ask") else "allow"),
                "rule": call.get("rule"), "call_id": call.get("call_id"), "args_hash": call.get("args_hash"),
                "policy_hash": payload.get("policy_hash"), "budget_limits": payload.get("budget"), "budget_used": _spent(payload.get("usage"))}
    with langsmith.trace(f"tool:{call.get('name')}", run_type="tool", inputs={"args_hash": call.get("args_hash"), "call_id": call.get("call_id")},
                         metadata=metadata, tags=["tool"]) as span:

        def done(calls: list[dict[str, Any]]) -> None:
            record = next(iter(calls), {})
            span.add_metadata({"ledger_key": record.get("ledger_key"), "outcome": record.get("status")})
            span.end(outputs={"status": record.get("status"), "sha256": record.get("sha256"), "observation_pointer": record.get("observation_pointer")})

        yield done


def calls_of_node(state: dict[str, Any], update: dict[str, Any]) -> None:
    """The calls a phase made or refused itself, as `tool` runs under it: the evidence reads of
    retrieve, the checks of verify, and the calls the gate denied (never sent). Calls sent by an
    `execute` task have their run there."""
    if not enabled():
        return
    boundary = state.get("boundary") or {}
    for record in update.get("observations") or []:
        if record.get("phase") in ("retrieve", "verify") or record.get("status") == "denied":
            decision = "denied" if record.get("status") == "denied" else "allow"
            call = {"server": record.get("server"), "name": record.get("tool"), "rule": record.get("rule"), "call_id": record.get("call_id"),
                    "args_hash": record.get("args_hash"), "decision": decision}
            with tool_run({"call": call, "policy_hash": boundary.get("policy_hash"), "budget": state.get("budget"), "usage": state.get("usage")}) as done:
                done([{"status": record.get("status"), "sha256": record.get("sha256"), "observation_pointer": record.get("pointer") or f"observation:{record.get('call_id')}"}])


def _spent(usage: dict[str, Any] | None) -> dict[str, Any]:
    """What the run had spent: its counters that are not zero."""
    return {key: value for key, value in (usage or {}).items() if isinstance(value, (int, float)) and value}


def hosted_tool_run(record: dict[str, Any]) -> None:
    """A provider-hosted call (graph/calls/hosted.py), reported after the fact, as a `tool` run under the act step."""
    if not enabled():
        return
    call = {"server": record.get("server"), "name": record.get("tool"), "rule": record.get("rule"), "call_id": record.get("call_id"),
            "args_hash": record.get("args_hash"), "decision": f"hosted:{record.get('decision')}"}
    with tool_run({"call": call}) as done:
        done([{"ledger_key": record.get("ledger_key"), "status": record.get("status"), "sha256": record.get("sha256"),
               "observation_pointer": record.get("pointer") or f"observation:{record.get('call_id')}"}])


def event(name: str, data: dict[str, Any]) -> None:
    """An approval, escalation or interrupt, as an event on the current node's run."""
    if not enabled():
        return
    from langsmith.run_helpers import get_current_run_tree

    if (current := get_current_run_tree()) is not None:
        current.add_event({"name": name, "kwargs": data})
