"""approve: ask a human about one gated call, then carry out the decision.

One `interrupt()` per gated call (each call is its own task), with a typed response schema so
clients and Studio render a form. Nothing with a side effect happens before the interrupt: on
resume this node re-runs from its start and `interrupt()` returns the stored decision.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict

from graph.budget import add_usage
from graph.services import Services, current_run_id
from nodes.execute import record_outcome, run_call
from tools import arguments, breakers, gateway, policy
from tools.outcome import CallOutcome

REJECTED = "rejected: a human declined {name}: {message}"
EDIT_INVALID = "invalid_arguments: the edited arguments for {name} are invalid: {problems}"
EDIT_DENIED = "denied: the edited call to {name} is not permitted ({rule}: {reason})"


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
    """Who decided; recorded in the trace."""


async def approve(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """`payload` is the Send argument: {"call", "settings", "profile", "retries_left", "usage"}."""
    call = payload["call"]
    answer = interrupt(_request(call, payload), response_schema=ApprovalDecision)
    decision = ApprovalDecision.model_validate(answer)
    record = {"call_id": call["call_id"], "decision": decision.decision, "approver": decision.approver, "at": time.time()}
    if decision.decision == "approve":
        update = _reserved(call, await run_call(call, payload, services, phase="act"))
    elif decision.decision == "edit":
        update = await _run_edited(call, decision.args or {}, payload, services)
    elif decision.decision == "respond":
        outcome = CallOutcome("ok", text=decision.result or "", detail="result given by a human; the tool was not run")
        update = await record_outcome(call, outcome, payload["settings"], services, started=time.time(), phase="act")
    else:
        text = REJECTED.format(name=call["name"], message=decision.message or "no reason given")
        update = _refused(call, "rejected", text)
    return {**update, "approvals": [record]}


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
        "budget_used": payload.get("usage", {}),
    }


async def _run_edited(call: dict[str, Any], new_args: dict[str, Any], payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """An edit is re-validated and re-decided: it can never turn into a call that policy denies."""
    spec = (await services.registry(current_run_id(), payload["settings"])).get(call["name"])
    if problems := arguments.validate(spec, new_args):
        return _refused(call, "invalid_arguments", EDIT_INVALID.format(name=call["name"], problems="; ".join(problems)))
    verdict = policy.decide(gateway.run_policy(payload["settings"], payload["profile"]), spec, new_args)
    if verdict.action == "deny":
        return _refused(call, "denied", EDIT_DENIED.format(name=call["name"], rule=verdict.rule_id, reason=verdict.reason))
    edited = {**call, "args": new_args, "args_hash": breakers.arguments_hash(new_args)}
    return _reserved(call, await run_call(edited, payload, services, phase="act"))


def _reserved(call: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A call that runs after approval spends the budget the gate reserved for it."""
    return {**update, "usage": add_usage(update.get("usage"), call.get("reservation"))}


def _refused(call: dict[str, Any], status: str, text: str) -> dict[str, Any]:
    message = ToolMessage(text, tool_call_id=call["tool_call_id"], name=call["name"], status="error")
    observation = {"call_id": call["call_id"], "stage": "intended", "status": status, "detail": text}
    return {"messages": [message], "observations": [observation]}
