"""gate: decide each tool call the actor proposed, before anything runs.

Refused calls get their one result message here (unknown_tool, invalid_arguments, denied,
budget_exceeded, circuit_open, repeated_call) — so do calls whose arguments were not even JSON
(LangChain's `invalid_tool_calls`); calls that need a human go to approve. Admitted and asked
calls alike are planned into dispatch waves in the order the model proposed them, so an approved
write never runs before an earlier admitted one. Never dispatches a call itself.
"""

from __future__ import annotations

import json
import time
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from graph import payload_tool
from graph.budget import Budget, add_usage
from graph.services import Services, current_run_id
from graph.status import Terminal, ending
from tools import gateway

MALFORMED = "invalid_arguments: {name}: the arguments are not valid JSON ({error}); received {raw!r}. Send the call again with a JSON object of named arguments."


async def gate(state: dict[str, Any], services: Services) -> dict[str, Any]:
    reply = _last_ai(state)
    turn = state["usage"]["calls_by_role"].get("actor", 1) - 1
    proposed = [
        gateway.ProposedCall(call_id=f"a{turn}.{position}", tool_call_id=call["id"], name=call["name"], args=call["args"])
        for position, call in enumerate(reply.tool_calls)
    ]
    proposed, builtin = payload_tool.split(proposed)  # the harness's own read-only tool: answered here, not by the gateway
    budget = Budget.model_validate(state["budget"])
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    admissions = await gateway.admit_all(
        proposed,
        registry=registry,
        rules=gateway.run_policy(state["settings"], state["task"]["profile"]),
        budget=budget,
        usage=state["usage"],
        breaker_state=state.get("breakers") or {},
        now=time.time(),
    )
    admissions += [_malformed(call, registry.get(call.name)) for call in _unparsed(reply, turn)]
    messages, observations, planned, asks = [], [], [], []
    usage: dict[str, Any] = {}
    stopping = None
    steps = (state.get("plan") or {}).get("steps", [])
    timeout_s = state["settings"].get("approval_timeout_s")
    expires_at = time.time() + timeout_s if timeout_s is not None else None
    for admission in admissions:
        call = {**admission.call, "step_id": _step_for(steps, admission.call["name"])}
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
    update: dict[str, Any] = {
        "observations": observations,
        "usage": usage,
        "dispatch": gateway.waves(planned, budget.parallel_calls),
        "status": {"phase": "gate"},
    }
    if messages:  # an empty write changes nothing and still costs a checkpoint row
        update["messages"] = messages
    if asks:
        update["approvals"] = asks
    if stopping:
        update["ending"] = stopping
    return update


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


def _step_for(steps: list[dict[str, Any]], tool: str) -> str | None:
    """The plan step a call serves: the first pending step that expects its tool."""
    return next((step["id"] for step in steps if step["status"] == "pending" and tool in step.get("tools", [])), None)


def _last_ai(state: dict[str, Any]) -> AIMessage:
    for message in reversed(state["messages"]):
        if isinstance(message, AIMessage):
            return message
    raise RuntimeError("gate reached without an actor message; the graph wiring is broken")


def _observation(call: dict[str, Any]) -> dict[str, Any]:
    keys = ("call_id", "tool_call_id", "name", "server", "args_hash", "side_effect", "reversibility", "rule")
    return {"tool": call["name"], **{key: call.get(key) for key in keys if key != "name"}, "phase": "act"}
