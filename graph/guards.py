"""guards: the conditional edges. Pure, deterministic functions of the checkpointed state.

Every edge first asks whether the run must stop (a node's ending, or a budget that the next
step would break) and routes to finalize if so; only then does it pick the next phase.
Routes that fan out return one `Send` per tool call, so each call is its own task.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage
from langgraph.types import Send

from graph.budget import Budget, check_before_model_call, check_before_step

Finalize = Literal["finalize"]


def must_stop(state: dict[str, Any]) -> bool:
    return bool(state.get("ending")) or check_before_step(state.get("usage", {}), Budget.model_validate(state["budget"])) is not None


def may_call_model(state: dict[str, Any]) -> bool:
    return not must_stop(state) and check_before_model_call(state.get("usage", {}), Budget.model_validate(state["budget"])) is None


def route_after_intake(state: dict[str, Any]) -> Literal["plan", "finalize"]:
    return "plan" if "budget" in state and may_call_model(state) else "finalize"


def route_after_plan(state: dict[str, Any]) -> Literal["validate_plan", "finalize"]:
    return "finalize" if must_stop(state) else "validate_plan"


def route_after_validate(state: dict[str, Any]) -> Literal["plan", "retrieve", "act", "finalize"]:
    if must_stop(state):
        return "finalize"
    plan = state["plan"]
    if not plan.get("valid"):
        return "plan" if may_call_model(state) else "finalize"
    if any(step.get("evidence") for step in plan["steps"]):
        return "retrieve"
    return "act" if may_call_model(state) else "finalize"


def route_after_retrieve(state: dict[str, Any]) -> Literal["act", "finalize"]:
    return "act" if may_call_model(state) else "finalize"


def route_after_act(state: dict[str, Any]) -> Literal["gate", "verify", "finalize"]:
    if must_stop(state):
        return "finalize"
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "gate"
    needs_judge = bool(state["task"].get("acceptance_criteria"))
    return "verify" if not needs_judge or may_call_model(state) else "finalize"


def route_tool_calls(state: dict[str, Any]) -> list[Send] | Literal["act", "finalize"]:
    """After gate, approve or observe: approvals first, then the next dispatch wave, then the actor."""
    asks = [call for call in state.get("approvals", []) if "reservation" in call and not _decided(state, call)]
    if asks:
        return [Send("approve", _payload(state, call)) for call in asks]
    if waves := state.get("dispatch"):
        return [Send("execute", _payload(state, call)) for call in waves[0]]
    return "act" if may_call_model(state) else "finalize"


def route_after_verify(state: dict[str, Any]) -> Literal["critique", "finalize"]:
    return "critique" if may_call_model(state) else "finalize"


def route_after_critique(state: dict[str, Any]) -> Literal["commit", "repair", "finalize"]:
    if must_stop(state):
        return "finalize"
    return "commit" if state["quality"]["critique"]["passed"] else "repair"


def route_after_repair(state: dict[str, Any]) -> Literal["act", "finalize"]:
    return "act" if may_call_model(state) else "finalize"


def _decided(state: dict[str, Any], call: dict[str, Any]) -> bool:
    return any(entry.get("call_id") == call["call_id"] and "decision" in entry for entry in state.get("approvals", []))


def _payload(state: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
    budget = Budget.model_validate(state["budget"])
    retries_left = 2 if budget.retries is None else min(2, budget.retries - state["usage"].get("retries", 0))
    return {
        "call": call,
        "settings": state["settings"],
        "profile": state["task"]["profile"],
        "retries_left": retries_left,
        "usage": state["usage"],
    }
