"""escalations: what a run that stops for a human asks, and the shape of the answer.

A run escalates for missing information, a budget extension, a result review, a review of repairs
that ran out, a disagreement between verifier and critic, or a plan approval. The request is a
function of the checkpointed state alone, so the node that asks and the trace that records it see
the same request, however often the node re-runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from boundloop.graph.core.budget import Budget, check_before_model_call, check_before_step
from boundloop.graph.core.status import Terminal, ending

Kind = Literal["plan_approval", "ask_user", "budget_extension", "review", "disagreement", "repair_review"]


class EscalationAnswer(BaseModel):
    """A human's answer to an escalation; which fields matter depends on the request's `type`."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    accept: bool | None = None
    """review / plan_approval: true to accept, false to reject (say why in `message`)."""
    answer: str | None = None
    """ask_user: the missing information or the clarification; empty to stop the run."""
    grant: dict[str, float | int | None] | None = None
    """budget_extension: new limits, e.g. {"tool_calls": 60}; empty or absent to stop the run. A review of
    exhausted repairs: new limits (e.g. {"repairs": 4}) to repair again, with `message` as guidance."""
    message: str | None = None
    """Why (a rejection or a stop); the planner or the record reads it."""
    approver: str | None = None
    """Who answered; recorded."""


def request(state: Mapping[str, Any]) -> tuple[Kind, dict[str, Any]]:
    """What to ask, from the state alone: a re-run of the asking node, and the trace, get the same."""
    stopping = state.get("ending")
    if stopping is None:
        exhaustion = _exhaustion(state)
        if exhaustion is None and state["status"].get("phase") in ("critique", "weigh"):
            return "disagreement", _disagreement(state["quality"])
        if exhaustion is None:
            return "plan_approval", {"type": "plan_approval", "steps": state["plan"]["steps"]}
        stopping = ending(exhaustion.code, exhaustion.message, exhaustion.next_safe_action, dimension=exhaustion.dimension)
    code = stopping["code"]
    if stopping.get("escalation") == "repair_review":
        return "repair_review", _repair_review(state["quality"], stopping)
    if code in (Terminal.MISSING_INFO, Terminal.AMBIGUOUS_INTENT):
        return "ask_user", {"type": "ask_user", "code": code, "question": stopping["reason"]}
    if code == Terminal.REVIEW_REQUIRED:
        result = state.get("result") or {}
        return "review", {"type": "review", "reason": stopping["reason"], "output": result.get("output"), "confidence": result.get("confidence")}
    dimension = stopping["dimension"]
    budget = Budget.model_validate(state["budget"])
    return "budget_extension", {"type": "budget_extension", "dimension": dimension, "limit": getattr(budget, dimension),
                                "used": state["usage"].get(dimension, 0), "reason": stopping["reason"], "ending": stopping}


def _disagreement(quality: dict[str, Any]) -> dict[str, Any]:
    verification, critique = quality["verification"], quality["critique"]
    verifier = "passed" if verification["passed"] else "failed: " + "; ".join(f"{f['criterion']}: {f['reason']}" for f in verification["failures"])
    critic = "passed" if not critique["below_minimum"] else "failed: below the minimum on " + ", ".join(critique["below_minimum"])
    if critique.get("unusable"):
        critic = f"gave no usable reply ({critique['unusable']})"
    return {"type": "review", "output": verification["output"], "confidence": critique["weighted"],
            "reason": f"the verifier and the critic disagree: verifier {verifier}; critic {critic}"}


def _repair_review(quality: dict[str, Any], stopping: Mapping[str, Any]) -> dict[str, Any]:
    """Repairs ran out: show the best output with the last diagnosis; a human accepts it, grants more
    repairs, or lets the ending stand."""
    best = quality.get("best") or {}
    last = (quality.get("repairs") or [{}])[-1]
    return {"type": "review", "reason": stopping["reason"], "output": best.get("output", quality.get("verification", {}).get("output")),
            "confidence": best.get("score"), "diagnosis": last.get("diagnosis", []), "ending": stopping}


def _exhaustion(state: Mapping[str, Any]) -> Any:
    budget = Budget.model_validate(state["budget"])
    return check_before_model_call(state["usage"], budget) or check_before_step(state["usage"], budget)


def can_ask_a_human(state: Mapping[str, Any]) -> bool:
    """An attended run with an escalation left: a human can review what a model could not judge."""
    limit = Budget.model_validate(state["budget"]).escalations
    return not state["settings"].get("unattended") and (limit is None or state["usage"].get("escalations", 0) < limit)


def waiting_status(requests: list[Any]) -> str:
    """The waiting status of a paused run, from what its first pending request asks."""
    request: dict[str, Any] = requests[0] if requests and isinstance(requests[0], dict) else {}
    return {
        "ask_user": request.get("code", Terminal.MISSING_INFO),
        "elicitation": Terminal.MISSING_INFO,
        "review": Terminal.REVIEW_REQUIRED,
        "budget_extension": (request.get("ending") or {}).get("code", Terminal.BUDGET_EXHAUSTED),
    }.get(request.get("type", ""), Terminal.CONFIRM_REQUIRED)


def waiting_for(requests: list[Any]) -> str:
    """What a paused run waits for, e.g. `CONFIRM_REQUIRED: tool_approval a2.1 workspace__write_file`."""
    asks = [" ".join(str(part) for part in (request.get("type"), request.get("call_id"), request.get("name")) if part)
            for request in requests if isinstance(request, dict)]
    status = waiting_status(requests)
    return f"{status}: {'; '.join(asks)}" if asks else status
