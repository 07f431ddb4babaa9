"""approve: ask a human about one gated call and record the decision.

One `interrupt()` per gated call (each call is its own task), with a typed response schema so
clients and Studio render a form. Before the interrupt the node only records the request (our
own bookkeeping, idempotent); no tool runs here at all: an approved call runs later in its place
in the dispatch waves, in the order the model proposed it (guards.route_tool_calls), so a later
approved write never overtakes an earlier admitted one. The decision is bound to the exact call —
run, call id, argument hash — and used once (boundloop.checkpoints.approvals); a decision that does not fit
is refused and the human is asked again. An expired request is decided as a rejection.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict

from boundloop.checkpoints import approvals
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.calls import hosted as hosted_tools
from boundloop.graph.core.budget import add_usage
from boundloop.graph.core.records import Approval, Observation
from boundloop.graph.state import LoopUpdate
from boundloop.graph.services import Services, current_run_id
from boundloop.nodes.calls import record_outcome
from boundloop.tools import arguments, breakers, gateway
from boundloop.tools.outcome import CallOutcome

REJECTED = "rejected: a human declined {name}: {message}"
EXPIRED = "approval for {name} expired before a decision; treated as a rejection"
EDIT_INVALID = "invalid_arguments: the edited arguments for {name} are invalid: {problems}"
EDIT_DENIED = "denied: the edited call to {name} is not permitted ({rule}: {reason})"
HOSTED_ONLY = "{name} is run by the provider, which takes no {decision}: approve or reject it"
ANSWERED_BY_A_HUMAN = "result given by a human; the tool was not run"
MAX_ASKS = 3
"""Refused decisions before the call is taken as rejected (each refusal asks again)."""


class ApprovalDecision(BaseModel):
    """A human's answer to one approval request."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    decision: Literal["approve", "edit", "reject", "respond"]
    """approve: run as proposed; edit: run with `args`; reject: do not run, tell the model `message`;
    respond: do not run, give the model `result` as the tool's output."""
    args: dict[str, Any] | None = None
    """New arguments (decision `edit`); re-validated and re-checked by policy."""
    message: str | None = None
    """Why the call was rejected (decision `reject`); the model reads it."""
    result: str | None = None
    """The tool result to hand the model instead of running the tool (decision `respond`)."""
    approver: str | None = None
    """Who decided; recorded with the decision and in the trace."""
    call_id: str | None = None
    """The call this decision is for; when given it must match the request."""
    args_hash: str | None = None
    """The argument hash the approver saw; when given it must match the request."""


async def approve(payload: dict[str, Any], services: Services) -> LoopUpdate:
    """`payload` (guards.task_payload, from the state this step starts from): the call, the run's pinned tools, settings and usage."""
    call = payload["call"]
    run_id, pool = current_run_id(), await services.pool()
    request = _request(call, payload)
    await approvals.request_approval(pool, thread_id=run_id, call_id=call["call_id"], tool=call["name"],
                                     args_hash=call["args_hash"], expires_at=call.get("expires_at"), payload=request)
    decision, recorded = await _decision(request, call, pool, run_id, payload["settings"].get("user"))
    record: Approval = {"call_id": call["call_id"], "decision": decision.decision, "approver": decision.approver, "run": False}
    if call.get("hosted"):  # the provider runs it: our answer is an approval response, never a dispatch
        message = None if decision.decision == "approve" else decision.message or REJECTED.format(name=call["name"], message="no reason given")
        update = hosted_tools.answer_decision(call, decision.decision == "approve", message, decision.approver)
    elif decision.decision == "approve":
        update, record["run"] = _reserved(call), True
    elif decision.decision == "edit":
        update, edited = await _check_edit(call, decision.args or {}, payload, services)
        if edited is not None:
            record.update({"run": True, "args": edited, "args_hash": breakers.arguments_hash(edited)})
    elif decision.decision == "respond":
        outcome = CallOutcome("ok", text=decision.result or "", detail=ANSWERED_BY_A_HUMAN)
        update = await record_outcome(call, outcome, payload["settings"], services, started=time.time(), phase="act",
                                     chars_left=payload.get("result_chars_left"))
        update["observations"][0]["answered_by"] = decision.approver or "human"
    else:
        update = _refused(call, "rejected", decision.message or REJECTED.format(name=call["name"], message="no reason given"))
    if payload["settings"].get("count_wait_time") and recorded is not None:
        waited = (recorded.decided_at - recorded.created_at).total_seconds()
        update["usage"] = add_usage(update.get("usage"), {"wall_clock_s": waited})
    return {**update, "approvals": [record]}


async def _decision(request: dict[str, Any], call: dict[str, Any], pool: Any, run_id: str, user: str | None) -> tuple[ApprovalDecision, Any]:
    """Ask until a decision fits the request (at most MAX_ASKS times), then use it once. A decision
    that names no approver is recorded as the run's user's."""
    refusal = None
    for asked_before in range(MAX_ASKS):
        asked = request if refusal is None else {**request, "refused": refusal, "asks_left": MAX_ASKS - asked_before}
        decision = ApprovalDecision.model_validate(interrupt(asked, response_schema=ApprovalDecision))
        decision.approver = decision.approver or user
        refusal = _binding_problem(decision, call)
        if refusal is None:
            try:
                recorded = await _claim(pool, run_id, call, decision)
            except ApprovalRefused as error:
                refusal = error.reason
                continue
            if approvals.expired(recorded):
                return ApprovalDecision(decision="reject", message=EXPIRED.format(name=call["name"]), approver=decision.approver), recorded
            if decision.decision == "reject":
                decision = decision.model_copy(update={"message": REJECTED.format(name=call["name"], message=decision.message or "no reason given")})
            return decision, recorded
    return ApprovalDecision(decision="reject", message=f"rejected: no valid decision after {MAX_ASKS} answers ({refusal})"), None


def _binding_problem(decision: ApprovalDecision, call: dict[str, Any]) -> str | None:
    if call.get("hosted") and decision.decision in ("edit", "respond"):
        return HOSTED_ONLY.format(decision=decision.decision, name=call["name"])
    if decision.call_id is not None and decision.call_id != call["call_id"]:
        return f"the decision names call {decision.call_id}, the request is for {call['call_id']}"
    if decision.args_hash is not None and decision.args_hash != call["args_hash"]:
        return "the decision is for other arguments than the ones the request was made for (argument hash mismatch)"
    return None


async def _claim(pool: Any, run_id: str, call: dict[str, Any], decision: ApprovalDecision) -> Any:
    """Use the request once. A node re-run after a crash finds its own decision already recorded."""
    try:
        return await approvals.decide(pool, thread_id=run_id, call_id=call["call_id"], args_hash=call["args_hash"],
                                      decision=decision.decision, approver=decision.approver, interrupt_id=None)
    except ApprovalRefused:
        recorded = await approvals.get_approval(pool, run_id, call["call_id"])
        if recorded is not None and (recorded.decision == decision.decision or approvals.expired(recorded)):
            return recorded
        raise


def _request(call: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_approval",
        "call_id": call["call_id"],
        "tool": call.get("tool"),
        "server": call.get("server"),
        "name": call["name"],
        "args": call["args"],
        "args_hash": call["args_hash"],
        "rule": call.get("rule"),
        "reason": call.get("reason"),
        "side_effect": call.get("side_effect"),
        "reversibility": call.get("reversibility"),
        **({"hosted": True} if call.get("hosted") else {}),
        "expires_at": call.get("expires_at"),
        "budget_used": {key: payload.get("usage", {}).get(key) for key in ("model_turns", "tool_calls", "cost_usd", "wall_clock_s")},
    }


async def _check_edit(
    call: dict[str, Any], new_args: dict[str, Any], payload: dict[str, Any], services: Services
) -> tuple[LoopUpdate, dict[str, Any] | None]:
    """An edit is re-validated and re-decided on what it reaches: it can never turn into a call that
    policy denies. Returns the update and the arguments to run (None: refused)."""
    spec = gateway.relied_spec(await services.registry(current_run_id(), payload["settings"], payload.get("tools")), call)
    assert spec is not None, "the gate admitted the call from this same pinned registry"
    if problems := arguments.validate(spec, new_args):
        return _refused(call, "invalid_arguments", EDIT_INVALID.format(name=call["name"], problems="; ".join(problems))), None
    rules = gateway.run_policy(payload["settings"], payload["profile"])
    verdict = await asyncio.to_thread(gateway.permission, rules, spec, new_args)
    if verdict.action == "deny":
        return _refused(call, "denied", EDIT_DENIED.format(name=call["name"], rule=verdict.rule_id, reason=verdict.reason)), None
    return _reserved(call), new_args


def _reserved(call: dict[str, Any]) -> LoopUpdate:
    """A call approved to run spends the budget the gate reserved for it."""
    return {"usage": add_usage(None, call.get("reservation"))}


def _refused(call: dict[str, Any], status: str, text: str) -> LoopUpdate:
    message = ToolMessage(text, tool_call_id=call["tool_call_id"], name=call["name"], status="error")
    observation: Observation = {"call_id": call["call_id"], "stage": "intended", "status": status, "detail": text}
    return {"messages": [message], "observations": [observation]}
