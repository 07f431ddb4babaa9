"""halt: what a cancelled run leaves behind, whoever cancelled it (Ctrl-C on the CLI, SIGTERM,
`runs.cancel` on the server): USER_CANCEL in the run registry and in the thread's status, a halt
record as its result, and a checkpoint that resumes where it stopped.

The halt is written as a state update on top of the last checkpoint, so the thread's pending
step stays pending: resuming the thread (no input) continues the run, and the next phase
overwrites the status. Never touches `ending`, which would route the run to finalize. The update
is applied as the node whose step made the checkpoint, whose edge runs again on it: the status is
kept whole, so a halt right after act's gate (status `gated`) still routes to the same approvals and
dispatch, and a halt right after execute goes on to act, which grounds the results.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from boundloop.checkpoints import store
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal, ending
from boundloop.nodes.finalize import failure_report

REASON = "cancelled by a user while the run was in phase {phase}"
NEXT_ACTION = "Resume the thread to continue from its last checkpoint (`boundloop resume {thread_id}`, or a run with no input on the server)."


async def halt(graph: CompiledStateGraph, thread_id: str, services: Services) -> dict[str, Any]:
    """Record the halt of `thread_id` on `graph` (which has the checkpointer); the halt record."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    snapshot = await graph.aget_state(config)
    values = dict(snapshot.values)
    status = values.get("status") or {}
    outcome = ending(Terminal.USER_CANCEL, REASON.format(phase=status.get("phase", "start")), NEXT_ACTION.format(thread_id=thread_id))
    record = failure_report(values, outcome)
    if values and snapshot.next:
        await graph.aupdate_state(config, {"status": {**status, "terminal": Terminal.USER_CANCEL.value}, "result": record},
                                  as_node=await _last_node(graph, snapshot))
    task = values.get("task") or {}
    await store.upsert_run(
        await services.pool(), thread_id=thread_id, goal=str(task.get("goal", "")), profile=str(task.get("profile", "")),
        status=Terminal.USER_CANCEL, task_hash=(values.get("boundary") or {}).get("task_hash", ""),
    )
    return record


async def _last_node(graph: CompiledStateGraph, snapshot: Any) -> str | None:
    """The node whose step made the checkpoint, when one node did (None: LangGraph infers it).

    LangGraph infers it from the nodes' seen channel versions, and a task sent by a guard (execute,
    approve) records none: after an execute step it would name act, whose guard would send the
    executed calls again instead of going on to act."""
    if snapshot.parent_config is None:
        return None
    ran = set((await graph.aget_state(snapshot.parent_config)).next)
    return ran.pop() if len(ran) == 1 else None
