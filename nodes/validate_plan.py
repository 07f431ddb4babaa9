"""validate_plan: check a plan deterministically — ids, dependencies acyclic, tools exist, budget fits.

Never calls a model. A rejected plan goes back to the planner while replans are left, as a
targeted re-plan (graph/quality/replan.py): only the steps the errors name, and their dependents, are
replaced (a run whose planning is `never` has none). After that the run ends: IMPOSSIBLE when the plan needs tools the run does not have,
VALIDATION_FAIL otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from boundloop.graph.quality import proportion, replan
from boundloop.graph.core.budget import Budget
from boundloop.graph.core.records import Plan
from boundloop.graph.core.plan import plan_hash
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.tools.arguments import validate as validate_arguments
from boundloop.tools.registry import ToolRegistry

UNKNOWN_TOOL = "step {step}: tool {tool!r} does not exist; available: {available}"
Problem = tuple[str | None, str]
"""(the step at fault, or None for the plan as a whole; the error)."""


async def validate_plan(state: LoopState, services: Services) -> LoopUpdate:
    plan: Plan = state["plan"].copy()
    if blocked := plan.get("blocked"):
        return _end(plan, blocked["code"], f"planner reports {blocked['code']}: {blocked['reason']}", "Answer the planner's question or change the task.")
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    budget = Budget.model_validate(state["budget"])
    problems: list[Problem] = [(None, error) for error in plan.get("errors") or []] or plan_problems(plan["steps"], registry, budget, state.get("usage", {}))
    errors = [error for _, error in problems]
    if not errors:
        valid = plan.copy()
        valid.pop("replan", None)
        return {"plan": {**valid, "valid": True, "hash": plan_hash(plan["steps"]), "errors": []}, "status": {"phase": "validate_plan"}}
    plan = {**plan, "valid": False, "errors": errors}
    replans_used = state.get("usage", {}).get("replans", 0)
    if (budget.replans is not None and replans_used >= budget.replans) or not proportion.planning_allowed(state):
        missing_tools = any("does not exist" in error for error in errors)
        code = Terminal.IMPOSSIBLE if missing_tools else Terminal.VALIDATION_FAIL
        reason = f"no valid plan after {replans_used + 1} attempt(s): " + "; ".join(errors)
        return _end(plan, code, reason, "Change the task or the available tools, or allow more replans (--budget replans=N).")
    plan["replan"] = replan.request("validation", "; ".join(errors), _to_replace(plan, problems))
    return {"plan": plan, "status": {"phase": "validate_plan"}}


def _to_replace(plan: Mapping[str, Any], problems: list[Problem]) -> list[str]:
    """The steps a targeted re-plan replaces; empty (the whole plan) when a problem names no step.
    An unreadable reply keeps the re-plan that was asked for, if one was."""
    if any(step_id is None for step_id, _ in problems):
        return list((plan.get("replan") or {}).get("steps") or []) if plan.get("errors") else []
    return replan.affected(plan["steps"], {step_id for step_id, _ in problems if step_id is not None})


def plan_errors(steps: Sequence[Mapping[str, Any]], registry: ToolRegistry, budget: Budget, usage: Mapping[str, Any]) -> list[str]:
    """Every reason the plan cannot run, in a stable order (empty: the plan is valid)."""
    return [error for _, error in plan_problems(steps, registry, budget, usage)]


def plan_problems(steps: Sequence[Mapping[str, Any]], registry: ToolRegistry, budget: Budget, usage: Mapping[str, Any]) -> list[Problem]:
    """`plan_errors`, each with the step at fault (None when the plan as a whole is at fault)."""
    if not steps:
        return [(None, "plan has no steps")]
    problems: list[Problem] = []
    ids = [step["id"] for step in steps]
    duplicates = sorted({step_id for step_id in ids if ids.count(step_id) > 1})
    if duplicates:
        problems.append((None, f"duplicate step ids {duplicates}"))
    known = set(ids)
    for step in steps:
        for dependency in step.get("depends_on", []):
            if dependency not in known:
                problems.append((step["id"], f"step {step['id']}: depends_on {dependency!r} is not a step id"))
        for tool in step.get("tools", []):
            if tool not in registry:
                problems.append((step["id"], UNKNOWN_TOOL.format(step=step["id"], tool=tool, available=registry.names())))
        problems.extend((step["id"], error) for error in _evidence_errors(step, registry))
    if cycle := _find_cycle(steps):
        problems.append((cycle[0], "dependency cycle " + " -> ".join(cycle)))
    problems.extend((None, error) for error in _budget_errors(steps, budget, usage))
    return problems


def _evidence_errors(step: Mapping[str, Any], registry: ToolRegistry) -> list[str]:
    call = step.get("evidence")
    if not call:
        return []
    spec = registry.get(call["tool"])
    if spec is None:
        return [UNKNOWN_TOOL.format(step=step["id"], tool=call["tool"], available=registry.names())]
    if not spec.hints.read_only:
        return [f"step {step['id']}: evidence tool {call['tool']!r} is not read-only; evidence steps may only read"]
    return [f"step {step['id']}: evidence arguments: {problem}" for problem in validate_arguments(spec, call.get("args", {}))]


def _find_cycle(steps: Sequence[Mapping[str, Any]]) -> list[str] | None:
    graph = {step["id"]: list(step.get("depends_on", [])) for step in steps}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return visiting[visiting.index(node):] + [node]
        if node in done or node not in graph:
            return None
        visiting.append(node)
        for dependency in graph[node]:
            if cycle := visit(dependency):
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in graph:
        if cycle := visit(node):
            return cycle
    return None


def _budget_errors(steps: Sequence[Mapping[str, Any]], budget: Budget, usage: Mapping[str, Any]) -> list[str]:
    """A lower-bound estimate: each step not done yet needs at least one tool call, so a plan the budget cannot pay for stops before it starts."""
    needed_calls = sum(max(len(step.get("tools", [])), 1) for step in steps if step.get("status") != "done")
    if budget.tool_calls is not None:
        left = budget.tool_calls - usage.get("tool_calls", 0)
        if needed_calls > left:
            return [f"plan needs at least {needed_calls} tool calls; budget has {left} left"]
    return []


def _end(plan: Plan, code: str, reason: str, next_action: str) -> LoopUpdate:
    return {
        "plan": plan,
        "ending": ending(code, reason, next_action),
        "status": {"phase": "validate_plan"},
    }
