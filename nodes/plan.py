"""plan: ask the planner model for a structured plan (steps, dependencies, tools, done criteria).

With a pending re-plan (graph/quality/replan.py) the planner is asked to replace only the affected steps;
the kept ones, done steps above all, are carried over untouched, and the re-plan is counted
against `budget.replans` and logged in the plan's `revisions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from langchain_core.messages import HumanMessage, SystemMessage

from boundloop.graph.context import memory
from boundloop.graph.quality import replan
from boundloop.graph.core.budget import Budget, remaining
from boundloop.graph.models.catalog import NoReply, call_model
from boundloop.graph.core.plan import PlanReply
from boundloop.graph.models.prompts import PLANNER, task_brief
from boundloop.graph.core.records import Plan
from boundloop.graph.core.replies import parse_reply
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.tools import authority


HELD_AUTHORITY = ("The run has read untrusted tool output, so your steps cannot widen what it may change: a call that changes "
                  "anything outside these is held for a human, or refused when the run is unattended:\n")


async def plan(state: LoopState, services: Services) -> LoopUpdate:
    """Ask for a plan; a reply that is not a plan is kept as a validation error for the next try."""
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    previous = state.get("plan") or {}
    pending = previous.get("replan")
    held = _held_authority(state, registry, previous)
    boundary = held or state.get("boundary") or {}
    request = [
        SystemMessage(PLANNER),
        HumanMessage(_brief(state, registry.specs(), previous, boundary)),
    ]
    try:
        reply, update = await call_model(state, services, "planner", request)
    except NoReply as stopped:
        return {**stopped.update, "status": {"phase": "plan"}}
    if pending:
        update["usage"] = {**update.get("usage", {}), "replans": 1}
    if held:
        update["boundary"] = held
    parsed, problem = parse_reply(str(reply.text), PlanReply)
    attempt = previous.get("attempts", 0) + 1
    new_plan: Plan
    if parsed is None and pending:  # keep what stands and the re-plan asked for; validate_plan asks again
        new_plan = {**previous, "attempts": attempt, "errors": [f"planner {problem}"], "valid": False}
    elif parsed is None:
        new_plan = {"steps": [], "blocked": None, "attempts": attempt, "errors": [f"planner {problem}"]}
    elif pending:
        keep = replan.kept(previous["steps"], pending)
        steps = replan.merge(keep, parsed.ordered_steps())
        new_plan = cast(Plan, {"steps": steps, "blocked": parsed.blocked and parsed.blocked.model_dump(mode="json"), "attempts": attempt,
                               "errors": [], "revisions": [*previous.get("revisions", []), replan.revision(pending, keep, steps)]})  # the planner's steps as JSON
    else:
        new_plan = cast(Plan, {**parsed.model_dump(mode="json", exclude={"ordering"}), "steps": parsed.ordered_steps(), "attempts": attempt, "errors": []})  # the planner's reply as JSON
    return {**update, "plan": new_plan, "status": {"phase": "plan"}}


def _held_authority(state: LoopState, registry: Any, previous: Mapping[str, Any]) -> dict[str, Any] | None:
    """The boundary with the plan targets in force now kept as the authority's, when this is the
    first plan made after the run read untrusted output: the planner may have been steered by it,
    so its steps must widen nothing (tools/authority.py). None when nothing changes."""
    boundary = state.get("boundary") or {}
    held = boundary.get("authority") or {}
    if "before_taint" in held or authority.run_taint(boundary, state.get("observations", []), registry) is None:
        return None
    return {**boundary, "authority": {**held, "before_taint": authority.from_plan(previous.get("steps", []))}}


def _brief(state: LoopState, specs: list[Any], previous: Mapping[str, Any], boundary: Mapping[str, Any]) -> str:
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
    if pending := previous.get("replan"):
        parts.append(replan.planner_brief(pending, previous.get("steps", [])))
    elif errors := previous.get("errors"):
        parts.append("Your previous plan was rejected:\n" + "\n".join(f"- {error}" for error in errors))
    if "before_taint" in (boundary.get("authority") or {}):  # a planner that knows the bound plans within it
        targets = authority.in_force(boundary, [])
        parts.append(HELD_AUTHORITY + ("\n".join(dict.fromkeys(f"- {each['kind']} {each['value']}" for each in targets)) or "- (nothing)"))
    return "\n\n".join(parts)
