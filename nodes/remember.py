"""remember: the memory write gate, run once a result has committed and its answer proposes
memories (commit → remember → finalize; an answer that proposes none goes from commit to finalize).

Promotes the final answer's candidate memories that its verified observations back
(graph/context/memory.py), within the `memory_writes` budget; where the profile says so, a human approves
first, through the same interrupt as every other request (`boundloop approve RUN m.approval`).
Every candidate's verdict, with the reason for each rejection, is a `memory` trace event; a
promoted memory's sources are stored as payloads, so it can be rebuilt from that event.
Decisions come from checkpointed state and stored payloads only, so a re-run decides the same;
nothing is written before the interrupt, and the store's keys are fixed per run and candidate.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from langgraph.types import interrupt

from boundloop.checkpoints import approvals, store
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.context import memory
from boundloop.graph.core.budget import Budget
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.escalations import EscalationAnswer
from boundloop.graph.state import LoopState, LoopUpdate

APPROVAL_CALL_ID = "m.approval"


async def remember(state: LoopState, services: Services) -> LoopUpdate:
    candidates = memory.proposed(state.get("messages", []))  # some: graph/guards.py routes here only then
    run_id, pool = current_run_id(), await services.pool()
    bodies: dict[str, str] = {}
    for obs in state.get("observations", []):
        if (pointer := obs.get("pointer")) and (payload := await store.get_payload(pool, pointer)) is not None:
            bodies[pointer] = payload.body
    sources = memory.source_texts(state, bodies)
    decisions: list[dict[str, Any]] = []
    accepted: list[tuple[int, dict[str, Any], list[tuple[dict[str, Any], str]]]] = []
    limit = Budget.model_validate(state["budget"]).memory_writes
    left = None if limit is None else max(limit - state["usage"].get("memory_writes", 0), 0)
    for number, candidate in enumerate(candidates):
        reason, backing = memory.judge(candidate, sources)
        if reason is None and left is not None and len(accepted) >= left:
            reason = f"budget.memory_writes exhausted: {limit} per run (raise it with --budget memory_writes=N)"
        if reason is None:
            accepted.append((number, candidate, backing))
        else:
            decisions.append({"number": number, "candidate": candidate, "promoted": False, "reason": reason})
    approver = None
    if accepted and state["task"]["profile"] in memory.APPROVAL_PROFILES:
        approver, refusal = await _approval(state, pool, run_id, [candidate for _, candidate, _ in accepted])
        if refusal:
            decisions += [{"number": number, "candidate": candidate, "promoted": False, "reason": refusal} for number, candidate, _ in accepted]
            accepted = []
    target = await memory.store_for(pool)
    settings, profile, now = state["settings"], state["task"]["profile"], time.time()
    confidence = float((state.get("quality") or {}).get("confidence") or 0.0)
    for number, candidate, backing in accepted:
        pointers = {obs["call_id"]: await store.put_payload(pool, run_id, obs["call_id"], text) for obs, text in backing}
        value = memory.memory_value(candidate, backing, pointers, run_id=run_id, user=settings.get("user", "default"), profile=profile,
                                    confidence=confidence, now=now, approved_by=approver)
        key = f"{run_id}.{number}"
        await target.aput(memory.namespace(value["user"], profile), key, value)
        decisions.append({"number": number, "candidate": candidate, "promoted": True, "key": key, "memory": value})
    decisions.sort(key=lambda item: item["number"])
    await store.append_trace(pool, run_id, "memory", node="remember", data={"decisions": decisions})
    return {"usage": {"memory_writes": len(accepted)}, "status": {"phase": "remember"}}


async def _approval(state: LoopState, pool: Any, run_id: str, candidates: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(approver, None) when a human approves the writes; (None, why not) otherwise."""
    if state["settings"].get("unattended"):
        return None, f"profile {state['task']['profile']} needs approval for memory writes and the run is unattended"
    request = {"type": "memory_approval", "memories": candidates}
    await approvals.request_approval(pool, thread_id=run_id, call_id=APPROVAL_CALL_ID, tool="memory_write", args_hash="",
                                     expires_at=None, payload=request)
    answer = EscalationAnswer.model_validate(interrupt({**request, "call_id": APPROVAL_CALL_ID}, response_schema=EscalationAnswer))
    with suppress(ApprovalRefused):  # this node ran again after a crash: its answer is already on record
        await approvals.decide(pool, thread_id=run_id, call_id=APPROVAL_CALL_ID, args_hash="",
                               decision="approve" if answer.accept else "reject", approver=answer.approver, interrupt_id=None)
    if not answer.accept:
        return None, "rejected by the approver" + (f": {answer.message}" if answer.message else "")
    return answer.approver or "human", None
