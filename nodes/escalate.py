"""escalate: stop and ask a human — for missing information, a budget extension, a result
review, a review of repairs that ran out, or plan approval — then continue from where the run stopped, or end it if they decline.

The same interrupt mechanism as tool approvals: one `interrupt()` with a typed response schema,
the request recorded (so `boundloop pending` lists it) and the answer recorded once. The request
is computed from checkpointed state only, so a re-run of this node asks exactly the same thing.
"""

from __future__ import annotations

import time
from typing import Any, cast

from langchain_core.messages import HumanMessage
from langgraph.types import interrupt

from boundloop.checkpoints import approvals
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.core import escalations
from boundloop.graph.core.budget import Budget, add_usage
from boundloop.graph.core.records import Ending, Quality, ResumeTo, Usage
from boundloop.graph.core.escalations import EscalationAnswer
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate

EXPIRED = "the {kind} request expired before a decision; treated as declined"


class Answered(LoopUpdate, total=False):
    """What a human's answer changes, and where the run continues (`status.resume_to`)."""

    resume_to: ResumeTo | None


async def escalate(state: LoopState, services: Services) -> LoopUpdate:
    kind, request = escalations.request(state)
    run_id, pool = current_run_id(), await services.pool()
    number = state["usage"].get("escalations", 0)
    call_id = f"e{number}.{kind}"
    timeout_s = state["settings"].get("approval_timeout_s")
    expires_at = time.time() + timeout_s if timeout_s is not None else None  # a re-run asks again; the first request's expiry stands
    await approvals.request_approval(pool, thread_id=run_id, call_id=call_id, tool=kind, args_hash="", expires_at=expires_at, payload=request)
    answer = EscalationAnswer.model_validate(interrupt({**request, "call_id": call_id}, response_schema=EscalationAnswer))
    recorded = await _record(pool, run_id, call_id, answer)
    if recorded is not None and approvals.expired(recorded):
        answer = EscalationAnswer(message=EXPIRED.format(kind=kind), approver=answer.approver)  # as a decline: the ending stands
    update: Answered = APPLY[kind](state, request, answer)
    usage: Usage = {"escalations": 1}
    if state["settings"].get("count_wait_time") and recorded is not None and recorded.decided_at is not None:
        usage["wall_clock_s"] = (recorded.decided_at - recorded.created_at).total_seconds()
    spent, resume_to = update.pop("usage", None), update.pop("resume_to", None)
    answered: Answered = {**update, "usage": add_usage(spent, usage), "status": {"phase": "escalate", "resume_to": resume_to}}
    return answered


def _approve_plan(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    plan = state["plan"]
    if answer.accept:
        return {"plan": {**plan, "approved": True, "approver": answer.approver}, "resume_to": "accepted_plan"}
    rejected = f"a human rejected the plan: {answer.message or 'no reason given'}"
    return {"plan": {**plan, "valid": False, "errors": [rejected]}, "usage": {"replans": 1}, "resume_to": "plan"}


def _answer_question(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    text = (answer.answer or "").strip()
    if not text:
        return {}  # no answer: the ending stands and the run ends with it
    clarification = f"{request['question']} → {text}"
    return {"clarifications": [*state.get("clarifications", []), clarification], "ending": None, "plan": {}, "resume_to": "plan"}


def _extend_budget(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    if not answer.grant:
        return {"ending": request["ending"]}  # declined: the exhaustion ends the run
    budget = Budget.model_validate({**state["budget"], **answer.grant})
    plan = state.get("plan") or {}
    resume_to: ResumeTo = "act" if plan.get("valid") and not plan.get("replan") else "plan"  # a stuck step's re-plan goes ahead
    return {"budget": budget.model_dump(mode="json"), "ending": None, "resume_to": resume_to}


def _review(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    who = answer.approver or "a reviewer"
    if answer.accept and request.get("output") is not None:
        return {"ending": ending(Terminal.SUCCESS, f"accepted by {who} at confidence {request.get('confidence')}")}
    if answer.accept:
        return {"ending": None, "resume_to": "act"}  # a human checked the uncertain calls; carry on
    return {"ending": ending(Terminal.VALIDATION_FAIL, f"rejected by {who}: {answer.message or 'no reason given'}",
                             "Change the task or the approach; the run's side effects were rolled back.")}


def _settle_disagreement(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    """Accepted: commit the output as a human vouched for it. Rejected: repair, with the reason."""
    quality: Quality = {**state["quality"]}
    if answer.accept:
        quality["accepted_by"] = answer.approver or "a reviewer"
        return {"quality": quality, "resume_to": "commit"}
    failures = [*quality["verification"]["failures"], {"criterion": "human review", "reason": answer.message or "rejected"}]
    quality["verification"] = {**quality["verification"], "passed": False, "failures": failures}
    return {"quality": quality, "resume_to": "repair"}


def _settle_repair(state: LoopState, request: dict[str, Any], answer: EscalationAnswer) -> Answered:
    """Accepted: commit the best output. Granted: repair again, the strategy ladder, stall window and
    repeat count starting afresh, with the human's message for the actor. Otherwise the ending stands."""
    quality: Quality = {**state["quality"]}
    if answer.accept:
        quality["accepted_by"] = answer.approver or "a reviewer"
        quality["verification"] = {**quality.get("verification", {}), "output": request.get("output") or ""}
        return {"quality": quality, "ending": None, "resume_to": "commit"}
    if answer.grant:
        quality["fresh_from"] = {"repairs": len(quality.get("repairs", [])), "scores": len(quality.get("scores", [])),
                                 "signatures": len(quality.get("failure_signatures", []))}
        quality["stall_replanned"] = False  # a write keeps the parts it does not name
        budget = Budget.model_validate({**state["budget"], **answer.grant})
        guidance = [HumanMessage(f"A human reviewer says: {answer.message}")] if answer.message else []
        return {"quality": quality, "budget": budget.model_dump(mode="json"), "ending": None, "messages": guidance, "resume_to": "act"}
    who = answer.approver or "a reviewer"
    return {"ending": cast(Ending, {**request["ending"], "reason": f"{request['ending']['reason']}; {who} declined: {answer.message or 'no reason given'}"})}  # the ending as the request recorded it


APPLY = {"plan_approval": _approve_plan, "ask_user": _answer_question, "budget_extension": _extend_budget, "review": _review,
         "disagreement": _settle_disagreement, "repair_review": _settle_repair}


async def _record(pool: Any, run_id: str, call_id: str, answer: EscalationAnswer) -> Any:
    """Use the request once; the request as recorded (None when it cannot be read back)."""
    decision = "approve" if answer.accept or answer.answer or answer.grant else "reject"
    try:
        return await approvals.decide(pool, thread_id=run_id, call_id=call_id, args_hash="", decision=decision, approver=answer.approver, interrupt_id=None)
    except ApprovalRefused:
        return await approvals.get_approval(pool, run_id, call_id)  # this node ran again after a crash: its answer is already on record
