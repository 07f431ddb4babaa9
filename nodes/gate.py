"""gate: decide each tool call the actor proposed, before anything runs. Runs inside act's node,
on the state with the actor's reply merged in (nodes/act.py), and is saved with that reply.

Each call is first tied to the plan step it serves (graph/schedule.py): a call whose step waits
for a step that is not done, and not served earlier in this turn, is refused (dependency_unmet)
before the gateway sees it — no budget, breaker or ledger effect. Refused calls get their one
result message here (dependency_unmet, unknown_tool, invalid_arguments, denied, budget_exceeded,
circuit_open, repeated_call) — so do calls whose arguments were not even JSON (LangChain's
`invalid_tool_calls`); calls that need a human go to approve. Admitted and asked calls alike are
planned into dispatch waves: by their dependencies, then in the order the model proposed them,
so an approved write never runs before an earlier admitted one. Never dispatches a call itself:
every admitted call then passes the wrapper at dispatch (nodes/calls.py, in the execute node), which
asks the policy again on what the call reaches by then, reserves the budget and writes the ledger.
The gate decides early so that refusals, approvals and waves are settled in the model's turn; the
wrapper decides again because time passes between the two.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, ToolMessage

from boundloop.graph.calls import hosted as hosted_tools
from boundloop.graph.context import payloads as payload_tool
from boundloop.graph import schedule
from boundloop.graph.core.budget import Budget, add_usage
from boundloop.graph.core.records import Approval, Usage
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.tools import authority, gateway

MALFORMED = "invalid_arguments: {name}: the arguments are not valid JSON ({error}); received {raw!r}. Send the call again with a JSON object of named arguments."


async def gate(state: LoopState, services: Services) -> LoopUpdate:
    """The decisions on the calls of the last actor reply, as a state update (no `status`: act's)."""
    reply = _last_ai(state)
    turn = state["usage"]["calls_by_role"].get("actor", 1) - 1
    proposed = [
        gateway.ProposedCall(call_id=f"a{turn}.{position}", tool_call_id=call["id"], name=call["name"], args=call["args"])  # type: ignore[arg-type]  # providers give every tool call an id
        for position, call in enumerate(reply.tool_calls)
    ]
    proposed, builtin = payload_tool.split(proposed)  # the harness's own read-only tool: answered here, not by the gateway
    budget = Budget.model_validate(state["budget"])
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    steps = (state.get("plan") or {}).get("steps", [])
    bindings = dict(zip((call.call_id for call in proposed), schedule.bind(steps, [
        (call.name, call.args, bool((spec := registry.get(call.name)) and spec.hints.read_only)) for call in proposed])))
    blocked = [call for call in proposed if bindings[call.call_id].missing]
    proposed = [call for call in proposed if call not in blocked]
    scope, tainted = _scope(state, registry)
    admissions = await gateway.admit_all(
        proposed,
        scope=scope,
        registry=registry,
        rules=gateway.run_policy(state["settings"], state["task"]["profile"]),
        budget=budget,
        usage=state["usage"],
        breaker_state=state.get("breakers") or {},
        now=time.time(),
    )
    admissions += [_malformed(call, registry.get(call.name)) for call in _unparsed(reply, turn)]
    messages, observations = _refuse_unmet(blocked, bindings, steps, registry)
    planned, asks = [], []
    usage: Usage = {}
    stopping = None
    parallel: dict[str | None, bool] = {step["id"]: step.get("parallel", True) for step in steps}
    timeout_s = state["settings"].get("approval_timeout_s")
    expires_at = time.time() + timeout_s if timeout_s is not None else None
    for admission in admissions:
        binding = bindings.get(admission.call["call_id"], schedule.Binding(None))
        solo = not admission.call.get("read_only") or not parallel.get(binding.step_id, True)
        call = {**admission.call, "step_id": binding.step_id, "level": binding.level, "solo": solo}
        observations.append({**_observation(call), "stage": "intended", "status": "pending"})
        if admission.verdict == "admit":
            planned.append(call)
            usage = add_usage(usage, admission.reservation)
        elif admission.verdict == "ask":
            planned.append({**call, "ask": True})
            asks.append({**call, "reason": admission.message, "reservation": admission.reservation, "expires_at": expires_at})
        else:
            messages.append(ToolMessage(admission.message, tool_call_id=call["tool_call_id"], name=call["name"], status="error"))
            observations[-1].update(status=admission.verdict, detail=admission.message)
            if admission.exhaustion is not None and stopping is None:
                stopping = ending(Terminal.BUDGET_EXHAUSTED, admission.exhaustion.message, admission.exhaustion.next_safe_action,
                                  dimension=admission.exhaustion.dimension)
    fetched = await payload_tool.answer(state, services, builtin) if builtin else {"messages": [], "observations": [], "usage": {}}
    messages, observations, usage = fetched["messages"] + messages, fetched["observations"] + observations, add_usage(usage, fetched["usage"])
    if hosted_tools.approval_requests(reply):  # a provider-side connector asks before it runs a tool
        answered = hosted_tools.admit_requests(state, reply, turn, add_usage(state["usage"], usage))
        messages, observations, asks = messages + answered["messages"], observations + answered["observations"], asks + answered["asks"]
        usage, stopping = add_usage(usage, answered["usage"]), stopping or answered.get("ending")
    update: LoopUpdate = {
        "observations": observations,
        "usage": usage,
        "dispatch": schedule.waves(planned, budget.parallel_calls),
    }
    if messages:  # an empty write changes nothing and still costs a checkpoint row
        update["messages"] = messages
    if asks:
        update["approvals"] = cast("list[Approval]", asks)  # each a call the gate admitted, with its approval request
    if stopping:
        update["ending"] = stopping
    if tainted:
        update["boundary"] = {**state["boundary"], "taint": scope.taint}
    return update


def _scope(state: LoopState, registry: Any) -> tuple[gateway.Scope, bool]:
    """The authority the gate holds calls to (`authority.in_force`), and the call whose untrusted
    output tainted the run; True when that taint is new (recorded now)."""
    boundary = state.get("boundary") or {}
    targets = authority.in_force(boundary, (state.get("plan") or {}).get("steps", []))
    found = authority.run_taint(boundary, state.get("observations", []), registry)
    return gateway.Scope(tuple(targets), found), found is not None and not boundary.get("taint")


def _refuse_unmet(calls: list[gateway.ProposedCall], bindings: dict[str, schedule.Binding], steps: Sequence[Mapping[str, Any]],
                  registry: Any) -> tuple[list[ToolMessage], list[dict[str, Any]]]:
    """The one result and the `intended` observation of each call held back by an unmet dependency."""
    messages, observations = [], []
    for call in calls:
        binding = bindings[call.call_id]
        text = schedule.refusal(steps, call.name, binding.step_id, binding.missing)
        messages.append(ToolMessage(text, tool_call_id=call.tool_call_id, name=call.name, status="error"))
        described = gateway.describe(call, registry.get(call.name))
        observations.append({**_observation(described), "step_id": binding.step_id, "stage": "intended", "status": "dependency_unmet", "detail": text})
    return messages, observations


def _unparsed(reply: AIMessage, turn: int) -> list[gateway.ProposedCall]:
    """The calls whose arguments LangChain could not parse (`invalid_tool_calls`), numbered after the others."""
    return [
        gateway.ProposedCall(f"a{turn}.{position}", call.get("id") or f"a{turn}.{position}", call.get("name") or "", call.get("args") or "")
        for position, call in enumerate(reply.invalid_tool_calls, start=len(reply.tool_calls))
    ]


def _malformed(call: gateway.ProposedCall, spec: Any) -> gateway.Admission:
    """The refusal of a call whose arguments are not a JSON object, naming the JSON error."""
    try:
        json.loads(call.args)
        error = "they are JSON but not an object of named arguments"
    except (json.JSONDecodeError, TypeError) as problem:
        error = f"{getattr(problem, 'msg', problem)} at line {getattr(problem, 'lineno', 1)} column {getattr(problem, 'colno', 1)}"
    text = MALFORMED.format(name=call.name or "(no name)", error=error, raw=str(call.args)[:200])
    return gateway.Admission("invalid_arguments", gateway.describe(call, spec), text)


def _last_ai(state: LoopState) -> AIMessage:
    for message in reversed(state["messages"]):
        if isinstance(message, AIMessage):
            return message
    raise RuntimeError("gate called without an actor message; act gates only a reply with calls")


def _observation(call: dict[str, Any]) -> dict[str, Any]:
    keys = ("call_id", "tool_call_id", "name", "server", "args_hash", "side_effect", "reversibility", "rule", "outside")
    return {"tool": call["name"], **{key: call.get(key) for key in keys if key != "name"}, "phase": "act"}
