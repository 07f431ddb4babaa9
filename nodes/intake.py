"""intake: accept a task, fix the settings, budget and autonomy boundary the run will live by.

It also pins the run's tools: their definitions as the servers list them now become the state's
`tools`, the only registry every later step uses (tools/pinning.py). An unplanned run on trusted
servers may pin the listing kept from an earlier run instead, marked `kept`, while its servers start
in the background; its first actor step confirms it (tools/kept_listing.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, ValidationError

from boundloop.graph.calls import task_check
from boundloop.graph.core import deadline
from boundloop.graph.context import memory
from boundloop.graph.quality import proportion
from boundloop.graph.core.budget import Exhaustion, empty_usage
from boundloop.graph.core.errors import BoundloopError, SettingsMissing
from boundloop.graph.models import roles
from boundloop.graph.models.catalog import api_of, model_id, price_of
from boundloop.graph.core.profiles import budget_for
from boundloop.graph.models.prompts import PROMPT_VERSION
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.graph.task import RunSettings, Task
from boundloop.tools import authority, gateway, hosted, pinning
from boundloop.tools.errors import ConfigError, PolicyError

NEEDS_RESPONSES = ("hosted tools need the Responses API, but model {model!r} is called through {api}; "
                   "set \"model_apis\": {{\"{model}\": \"responses\"}} in the settings (CLI: in the --config file)")


async def intake(state: LoopState, runtime: Runtime[RunSettings], services: Services) -> LoopUpdate:
    """Validate the task, capture settings, start the run's tool servers and pin their tools, record the boundary,
    and decide which costly phases the task needs (graph/quality/proportion.py); a task that is not planned gets its implicit plan here."""
    if not state.get("settings") and not _given(runtime.context):
        raise SettingsMissing(current_run_id())
    try:
        task = Task.model_validate(_as_dict(state.get("task")))
        settings = RunSettings.model_validate(_as_dict(state.get("settings") or runtime.context))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return _refuse(Terminal.VALIDATION_FAIL, f"task rejected: {where}: {first['msg']}", "Fix the task and submit it again.")
    budget = budget_for(task.profile, task.budget)
    settings_json = settings.model_dump(mode="json")
    control = proportion.decide(task.model_dump(mode="json"), settings_json)
    try:
        left = deadline.budget_left_s(budget.model_dump(), state.get("usage"))
        try:  # the servers' start is charged to the wall clock, so it is bounded by it too
            # Unplanned and without hosted tools, the first model request is the actor's alone: it may go out on a kept listing while the servers start.
            pinned, listing = await asyncio.wait_for(
                services.tool_pins(current_run_id(), settings_json, may_keep=not control["planning"]["plan"] and not settings.hosted_tools), left)
        except TimeoutError:
            if left is None or budget.wall_clock_s is None:
                raise
            out = Exhaustion("wall_clock_s", left, budget.wall_clock_s, Terminal.TIMEOUT)
            return _refuse(Terminal.TIMEOUT, f"budget.wall_clock_s ran out while the tool servers started ({left:.3g} s of {budget.wall_clock_s:g} s given them).",
                           out.next_safe_action + " Or check why the servers start slowly.", settings_json)
        model = model_id(settings_json)
    except BoundloopError as error:
        return _refuse(Terminal.UNAVAILABLE_DEP, str(error), "Fix the configuration and run again.", settings_json)
    except Exception as error:  # a tool server that will not start is a dependency failure, not a crash
        return _refuse(Terminal.UNAVAILABLE_DEP, f"tool servers unavailable: {error}", "Check the MCP server configuration.", settings_json)
    registry = await services.registry(current_run_id(), settings_json, pinned)  # built once, for every later step too
    try:
        policy = gateway.run_policy(settings_json, task.profile)
    except PolicyError as error:
        return _refuse(Terminal.VALIDATION_FAIL, str(error), "Fix the policy rules and run again.", settings_json)
    if refusal := task_check.check(task.model_dump(mode="json"), registry.specs(), policy):
        return _refuse(refusal.code, refusal.reason, refusal.next_safe_action, settings_json)
    try:
        offered = hosted.offering(hosted.load(settings.hosted_tools), policy)
    except ConfigError as error:
        return _refuse(Terminal.VALIDATION_FAIL, str(error), "Fix the hosted tools and run again.", settings_json)
    actor = roles.settings_for(settings_json, "actor")  # hosted tools go with the actor's requests
    if offered and api_of(actor) != "responses":
        return _refuse(Terminal.VALIDATION_FAIL, NEEDS_RESPONSES.format(model=actor["model"], api=api_of(actor)),
                       "Choose a Responses-API model for the run, or drop the hosted tools.", settings_json)
    update: LoopUpdate = {
        "task": task.model_dump(mode="json"),
        "settings": settings_json,
        "tools": {**pinned, "kept": True} if listing["kept"] else pinned,
        "budget": budget.model_dump(mode="json"),
        "boundary": {
            "profile": task.profile,
            "policy_hash": policy.version_hash(),
            "unattended": settings.unattended,
            "servers": sorted({spec.server for spec in registry.specs()}),
            "tools": registry.names(),
            "tool_registry_version": pinned["version"],
            "model": model,
            "hosted": offered,
            "prompt_version": PROMPT_VERSION,
            "task_hash": task.content_hash(),
            "authority": {"targets": authority.declared(task.model_dump(mode="json"))},
        },
        "usage": empty_usage(),
        "status": {"phase": "intake"},
        "ending": None,
        "control": {**control, "listing": listing},
        "memories": await memory.recall(
            await memory.store_for(await services.pool()), user=settings.user, profile=task.profile, goal=task.goal
        ),
    }
    if not control["planning"]["plan"]:
        update["plan"] = proportion.implicit_plan(update["task"])
    unpriced = [model_id(each) for each in roles.every_model(settings_json) if price_of(each, model_id(each)) is None]
    if budget.cost_usd is not None and unpriced:
        model = unpriced[0]
        exhaustion = Exhaustion("cost_usd", 0, budget.cost_usd, Terminal.BUDGET_EXHAUSTED, unpriced=True, model=model)
        update["ending"] = ending(
            Terminal.BUDGET_EXHAUSTED, f"budget.cost_usd cannot be computed: no price for model {model!r}.", exhaustion.next_safe_action,
            dimension="cost_usd",
        )
    return update


def _given(context: Any) -> bool:
    """Whether the run was given settings as its context (the server passes an empty one when none were)."""
    return bool(context.model_fields_set if isinstance(context, BaseModel) else context)


def _as_dict(value: Any) -> dict[str, Any]:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value or {})


def _refuse(code: Terminal, reason: str, next_action: str, settings: dict[str, Any] | None = None) -> LoopUpdate:
    return {
        "settings": settings or {},
        "usage": empty_usage(),
        "status": {"phase": "intake"},
        "ending": ending(code, reason, next_action),
    }
