"""trace: write what each node did to the run's trace, and keep the run registry current.

One trace event per node (phase, time spent, ending if any); the run registry row is created at
intake and closed at finalize with the terminal code and artifact. The full picture — what the
run was allowed to do, the path, the tools, the budget, why it stopped — is `explain()` in the CLI,
read from these events and the checkpointed state. The intake event carries the tool registry
version (the hash of the tool definitions pinned for the run). Events are redacted before they are
written (tools/secrets.py): no credential-named key or known secret value reaches the trace.
"""

from __future__ import annotations

from typing import Any

from checkpoints import store
from graph.services import Services
from tools import secrets


async def record_node(services: Services, run_id: str, node: str, state: dict[str, Any], update: dict[str, Any], elapsed_s: float) -> None:
    pool = await services.pool()
    event: dict[str, Any] = {"elapsed_ms": round(elapsed_s * 1000, 3)}
    if ending := update.get("ending"):
        event["ending"] = {key: str(value) for key, value in ending.items()}
    if measured := update.get("context"):  # the context measure of the node's model call (graph/context.py)
        event["context"] = {key: measured[key] for key in ("role", "tokens", "growth", "method", "limit", "pressure", "compactions") if key in measured}
    if node == "gate":
        event["calls"] = [{key: obs.get(key) for key in ("call_id", "tool", "status", "rule")} for obs in update.get("observations", [])]
    if node == "intake" and (tools := update.get("tools")):
        event["tool_registry_version"] = tools["version"]
    await store.append_trace(pool, run_id, kind="node", node=node, data=secrets.redact(event))
    task = update.get("task") or state.get("task") or {}
    if node == "intake":
        await store.upsert_run(pool, thread_id=run_id, goal=str(task.get("goal", "")), profile=str(task.get("profile", "")),
                               status="running", task_hash=(update.get("boundary") or {}).get("task_hash", ""))
    elif node == "finalize":
        await store.upsert_run(pool, thread_id=run_id, goal=str(task.get("goal", "")), profile=str(task.get("profile", "")),
                               status=str(update["status"]["terminal"]), task_hash=(state.get("boundary") or {}).get("task_hash", ""),
                               result=secrets.redact(update.get("result")))
