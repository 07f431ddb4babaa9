"""execute: run one admitted tool call (each call is its own LangGraph task, sent by the guards).

This is the wrapper node every tool call of the act phase passes: `calls.run_call` re-asks the
policy on what the call reaches now, reserves and settles the budget, writes the write-ahead ledger,
dispatches, and records one result. Because every call is its own task, one call's failure or
interrupt never re-runs a sibling. Reads run freely in parallel; side-effecting calls go one at a
time (the run's write lock) and through the ledger, so a crash and resume never sends a completed
call again. A server's question during the call stops the call and interrupts the run
(graph/calls/elicitation.py).
"""

from __future__ import annotations

from typing import Any

from boundloop.graph.state import LoopUpdate
from boundloop.graph.services import Services
from boundloop.nodes.calls import run_call


async def execute(payload: dict[str, Any], services: Services) -> LoopUpdate:
    """`payload` (guards.task_payload, from the state this step starts from): the call, the run's pinned tools and settings, and what the call may spend."""
    return await run_call(payload["call"], payload, services, phase="act")
