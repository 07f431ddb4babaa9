"""plan: ask the planner model for a structured plan (steps, dependencies, tools, done criteria)."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from graph import memory
from graph.budget import Budget, remaining
from graph.models import NoReply, call_model
from graph.plan import PlanReply
from graph.prompts import PLANNER, task_brief
from graph.replies import parse_reply
from graph.services import Services, current_run_id


async def plan(state: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ask for a plan; a reply that is not a plan is kept as a validation error for the next try."""
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    previous = state.get("plan") or {}
    request = [
        SystemMessage(PLANNER),
        HumanMessage(_brief(state, registry.specs(), previous.get("errors") or [])),
    ]
    try:
        reply, update = await call_model(state, services, "planner", request)
    except NoReply as stopped:
        return {**stopped.update, "status": {"phase": "plan"}}
    parsed, problem = parse_reply(str(reply.text), PlanReply)
    attempt = previous.get("attempts", 0) + 1
    if parsed is None:
        new_plan = {"steps": [], "blocked": None, "attempts": attempt, "errors": [f"planner {problem}"]}
    else:
        new_plan = {**parsed.model_dump(mode="json"), "attempts": attempt, "errors": []}
    return {**update, "plan": new_plan, "status": {"phase": "plan"}}


def _brief(state: dict[str, Any], specs: list[Any], errors: list[str]) -> str:
    budget = Budget.model_validate(state["budget"])
    tools = [
        {"name": spec.qualified_name, "read_only": spec.hints.read_only, "description": spec.description[:200]}
        for spec in specs
    ]
    parts = [
        task_brief({**state["task"], "clarifications": state.get("clarifications", [])}),
        "Tools:\n" + json.dumps(tools, indent=1),
        "Budget left: " + json.dumps(remaining(state.get("usage", {}), budget)),
    ]
    if state.get("memories"):
        parts.append("Memories:\n" + memory.brief(state["memories"]))
    if errors:
        parts.append("Your previous plan was rejected:\n" + "\n".join(f"- {error}" for error in errors))
    return "\n\n".join(parts)
