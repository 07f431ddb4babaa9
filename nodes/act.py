"""act: ground what the turn's calls returned, ask the actor for the next calls or the final answer,
and gate the calls it proposes — one graph step per turn.

A step that follows dispatched calls (status `gated`: execute or approve ran since) first grounds
their results (nodes/observe.py). While the turn still has work — another dispatch wave, an
approval, a re-plan, a stop — the step is that grounding alone, and the guard routes on as it
would after a separate observe step. Otherwise the actor is asked, on the state with the grounding
merged in, and the gate (nodes/gate.py: plan step, registry, arguments, policy, budget, breakers,
dispatch waves) decides the reply's calls in the same step, so grounding, reply and decisions are
saved in one checkpoint. Permission still comes before dispatch: the guard after act
(guards.route_tool_calls) sends calls to execute or approve only from the decisions in the saved
state, and LangGraph runs those tasks only after this step's checkpoint is written. A crash before
that save loses the step whole: the resumed step grounds again (a pure function of the saved
results, plus read-only post-condition reads) and asks the model again. Nothing ran in between (act
never dispatches), so no side effect is lost or repeated; only the model call is paid twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from boundloop.graph.context import compaction, memory, payloads as payload_tool
from boundloop.graph.models import size
from boundloop.graph.quality import goal_check
from boundloop.graph import guards, ladder, schedule
from boundloop.graph.calls import hosted as hosted_tools
from boundloop.graph.core import deadline
from boundloop.graph.core.budget import add_usage
from boundloop.graph.core.records import Status
from boundloop.graph.models.catalog import NoReply, call_model, model_id
from boundloop.graph.models.prompts import ACTOR, MEMORY_RULE, SCHEMA_RULE, evidence_brief, task_brief
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.graph.state import applied, combined
from boundloop.graph.core.status import Terminal, ending
from boundloop.nodes.gate import gate
from boundloop.nodes.observe import observe
from boundloop.tools import kept_listing, pinning
from boundloop.tools.errors import ConfigError

GATED: Status = {"phase": "act", "gated": True}
"""act's status when the gate decided the reply's calls in this step: the guard dispatches them."""
GROUNDED: Status = {"phase": "observe", "gated": True}
"""act's status when the step only grounded results and the turn goes on: the guard routes it on."""


async def act(state: LoopState, services: Services) -> LoopUpdate:
    """Ground the turn's results, then one actor turn and the gate's decisions (see the module docstring)."""
    grounded: LoopUpdate = {}
    if (state.get("status") or {}).get("gated"):  # execute or approve ran since the last turn
        grounded = await observe(state, services)
        state = applied(state, grounded)
        if guards.route_tool_calls(state) != "act":  # another wave, an approval, a re-plan or a stop
            return {**grounded, "status": GROUNDED.copy()}
    update = await ask_actor(state, services)
    return combined(grounded, await gate_reply(state, update, services))


async def gate_reply(state: LoopState, update: LoopUpdate, services: Services) -> LoopUpdate:
    """`update` with the gate's decisions on the reply's calls, when the run goes on to decide them
    (guards.needs_gate); else `update`."""
    after = applied(state, update)
    if not guards.needs_gate(after):
        return update
    return {**combined(update, await gate(after, services)), "status": GATED.copy()}


async def ask_actor(state: LoopState, services: Services) -> LoopUpdate:
    """The actor's reply, or what stopped it. The brief (task, plan progress, evidence) is rebuilt each turn, not stored."""
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    request, tools = actor_request(state, [spec.for_model() for spec in registry.specs()])
    try:
        offered, options = hosted_tools.offer(state)
    except ConfigError as error:  # a hosted tool's `${VAR}` is not set in this process
        stop = ending(Terminal.UNAVAILABLE_DEP, str(error), f"Export it, then continue with `boundloop resume {current_run_id()}`.",
                      dependency="hosted_tools", resume_to="act")
        return {"ending": stop, "status": {"phase": "act"}}
    tools = [*tools, *offered]
    measure = size.measure(model_id(state["settings"]), request, tools)  # once: the gate's and the call's
    if measured := compaction.pressure(state, measure):  # the context pressure gate: compact first
        return {"context": measured, "status": {"phase": "act"}}
    checked = await goal_check.before_turn(state, services)  # every goal_check_every turns; may end the run here
    if checked.stops:
        return {**checked.update, "status": {"phase": "act"}}
    try:
        reply, update = await call_model(state, services, "actor", request, tools=tools, options=options, spent=checked.update, measure=measure)
    except NoReply as stopped:
        return {**stopped.update, "status": {"phase": "act"}}
    replied: LoopUpdate = {**checked.update, **update, "usage": add_usage(checked.update.get("usage"), update["usage"])}
    if (state.get("tools") or {}).get("kept"):  # the reply was made from a kept listing: the live one decides
        live = await confirm_kept_tools(state, services)
        if live.get("ending"):
            return {**replied, **live, "status": {"phase": "act"}}
        if not pinning.same_tools(live["tools"], state["tools"]):  # drop the reply unsent; ask again on the live definitions
            live["control"] = {**state["control"], "listing": {"kept": True, "reason": kept_listing.KEPT, "differed": True}}
            return {**combined(replied, await ask_actor(applied(state, {**replied, **live}), services)), **live}
        replied = {**replied, **live}
    reported = await hosted_tools.observe_reply(state, services, reply)  # calls the provider already made
    usage = add_usage(replied["usage"], reported.pop("usage", None))
    return {**replied, **reported, "usage": usage, "messages": [reply], "status": {"phase": "act"}}


async def confirm_kept_tools(state: LoopState, services: Services) -> LoopUpdate:
    """The live pins (`tools`) once the run's servers are up, or the ending when they do not come up in time."""
    run_id = current_run_id()
    try:
        return {"tools": await asyncio.wait_for(services.live_pins(run_id, state["settings"], state["tools"]), deadline.seconds_left())}
    except TimeoutError:
        if not deadline.passed():
            raise
        return {"ending": ending(Terminal.TIMEOUT, "the step's time ran out while the tool servers started.",
                                 f"Check why the servers start slowly, then continue with `boundloop resume {run_id}`.")}
    except Exception as error:  # a tool server that will not start is a dependency failure, as at intake
        return {"ending": ending(Terminal.UNAVAILABLE_DEP, f"tool servers unavailable: {error}",
                                 f"Check the MCP server configuration, then continue with `boundloop resume {run_id}`.",
                                 dependency="mcp_servers", resume_to="act")}


def actor_request(state: Mapping[str, Any], tools: list[dict[str, Any]]) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    """The actor's request as it would be sent now: messages and offered tools."""
    task = state["task"]
    schema_rule = SCHEMA_RULE.format(schema=json.dumps(task["output_schema"])) if task.get("output_schema") else ""
    memory_rule = MEMORY_RULE if state["budget"].get("memory_writes") != 0 else ""  # None: no limit
    request = [
        SystemMessage(ACTOR.format(memory_rule=memory_rule, schema_rule=schema_rule)),
        HumanMessage(_brief(state)),
        *compaction.current(state, current_run_id()),
    ]
    return request, [*tools, payload_tool.SPEC] if payload_tool.offered(state) else tools


def _brief(state: Mapping[str, Any]) -> str:
    """The task, then only the sections that say something the task does not: an unrevised implicit
    plan is the goal again, and no evidence is no news, so neither is sent on every request."""
    plan = state.get("plan") or {}
    records = state.get("observations", [])
    evidence = ladder.of(records).evidence_of(records)
    sections = [task_brief({**state["task"], "clarifications": state.get("clarifications", [])})]
    if not plan.get("implicit"):
        sections.append("Plan:\n" + plan_brief(plan))
    if evidence:
        sections.append("Evidence:\n" + evidence_brief(evidence))
    if state.get("memories"):
        sections.append("Memories:\n" + memory.brief(state["memories"]))
    return "\n\n".join(sections)


def plan_brief(plan: Mapping[str, Any]) -> str:
    """The plan as the actor reads it: each step's status and what it waits for, the ready set, the
    latest re-plan. A call for a step that waits is refused, so the ready set is what to work on."""
    steps = plan.get("steps", [])
    if not steps:
        return "(none)"
    lines = []
    for step in steps:
        waits = schedule.missing_dependencies(steps, step["id"])
        lines.append(f"- [{step['status']}] {step['id']}: {step['description']}" + (f" (waits for {', '.join(waits)})" if waits else ""))
    lines.append("Ready now: " + (", ".join(schedule.ready_steps(steps)) or "none"))
    if revisions := plan.get("revisions"):
        last = revisions[-1]
        lines.append(f"Re-planned after {last['cause']} ({last['reason']}): done steps stay done; do not repeat their calls.")
    return "\n".join(lines)
