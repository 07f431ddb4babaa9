"""hosted_tools: provider-hosted tools inside the loop — offered by the policy, approved through our
interrupt, and every call the provider reports accounted for like our own.

Three moments (the offering itself was decided at intake, tools/hosted.py):
- offering (act): the offered tools join the actor's request while the budget has room for a
  tool call, with `max_tool_calls` set to the tool calls left; `${VAR}` references expand only now.
- approving (gate, approve): a connector's `mcp_approval_request` is decided by the policy on its
  real arguments, then by the budget; allow and deny are answered at once, ask goes to the approve
  node's interrupt like any of our calls. Each answer is an `mcp_approval_response` item in a user
  message, which the next request carries.
- reporting (act): each `web_search_call`, `file_search_call`, `code_interpreter_call` and `mcp_call`
  item of a reply becomes an observation, grounded at `observed` (nothing of ours can check it);
  it is charged (tool calls, side effects, its per-call price, result chars), its output is read for
  instructions to the agent (the safety breaker's cues, as observe does for our calls), written to the trace
  as a tool call of the act step and to LangSmith as a `tool` run; one with side effects gets a
  ledger entry marked irreversible: COMPLETE, ABORT when it failed, INTENT when its outcome is unknown.
  A reported call the run neither offered nor approved ends the run PERMISSION_DENIED; one the
  budget had no room for (a provider that runs a tool it was not offered in that request) ends it
  with the budget's ending, charged all the same.
Never runs a tool, and cannot stop the provider running a tool it was offered.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from boundloop.checkpoints import store
from boundloop.graph.trace import langsmith as langsmith_trace
from boundloop.graph.core.budget import Budget, add_usage, check_before_tool_call, tool_call_reservation
from boundloop.graph.core.records import Observation, Usage
from boundloop.graph.models.catalog import tool_call_price_of
from boundloop.graph.safety import instruction_cues
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopUpdate
from boundloop.graph.core.status import Terminal, ending
from boundloop.tools import breakers, dispatch, gateway, hosted
from boundloop.tools import policy as policies
from boundloop.tools.ledger import idempotency_key
from boundloop.tools.registry import qualified_name

REQUEST = "mcp_approval_request"
RESPONSE = "mcp_approval_response"
REVERSIBILITY = "irreversible"
"""What a hosted side effect is taken to be: the provider says nothing about undoing it."""
OVER_BUDGET = "the provider reports {tool} ({item} {id}) after the budget had no room for it: {exhausted}"
UNKNOWN_CONNECTOR = "denied: no connector {label!r} was offered to this run; connectors offered: {offered}"
NOT_OFFERED_TOOL = "denied: {tool} is not among the tools offered from connector {label!r}"
BAD_ARGUMENTS = "invalid_arguments: {tool}: the provider sent arguments that are not a JSON object ({raw!r})"
UNPERMITTED = "the provider reports {tool} ({item} {id}), which this run neither offered nor approved"
UNPERMITTED_NEXT = ("Check what the call did (its ledger entry and observation {call_id}), then tighten the hosted "
                    "tools or the policy before running again.")


def blocks(message: Any) -> list[dict[str, Any]]:
    """The typed items of a Responses reply (an empty list for a plain-text reply)."""
    content = getattr(message, "content", None)
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def approval_requests(message: Any) -> list[dict[str, Any]]:
    return [block for block in blocks(message) if block.get("type") == REQUEST]


def offer(state: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The hosted tools to add to the actor's request, and the request options that go with them.
    Nothing is offered once the budget has no room for one more tool call."""
    offers = [entry for entry in (state.get("boundary") or {}).get("hosted") or [] if entry["offered"]]
    if not offers:
        return [], {}
    budget, usage = Budget.model_validate(state["budget"]), state.get("usage") or {}
    roomy = [entry for entry in offers if check_before_tool_call(usage, budget, tool=_offered_name(entry), server=entry["name"],
                                                                 has_side_effect=entry["side_effect"]) is None]
    if not roomy:
        return [], {}
    options = {} if budget.tool_calls is None else {"max_tool_calls": max(budget.tool_calls - usage.get("tool_calls", 0), 1)}
    return hosted.provider_tools(roomy), options


async def observe_reply(state: Mapping[str, Any], services: Services, reply: AIMessage) -> LoopUpdate:
    """The update that accounts for every hosted call `reply` reports (see the module docstring)."""
    items = [block for block in blocks(reply) if block.get("type") in hosted.ITEM_TYPES]
    if not items:
        return {}
    offers = {entry["name"]: entry for entry in (state.get("boundary") or {}).get("hosted") or []}
    decided = {obs["provider_id"]: obs for obs in state.get("observations", []) if obs.get("provider_id")}
    spent, budget = state.get("usage") or {}, Budget.model_validate(state["budget"])
    turn = spent.get("calls_by_role", {}).get("actor", 0)
    usage: Usage
    observations, usage, stopping = [], {}, None
    for position, item in enumerate(items):
        record, delta = await _account(item, f"h{turn}.{position}", offers, decided, state["settings"], services)
        observations.append(record)
        over = None
        if delta.get("tool_calls"):  # not reserved at an approval: the budget must still have had room for it
            over = check_before_tool_call(add_usage(spent, usage), budget, tool=record["tool"], server=record["server"],
                                          has_side_effect=record["side_effect"])
        usage = add_usage(usage, delta)
        if stopping is not None:
            continue
        if not record["permitted"]:
            stopping = ending(Terminal.PERMISSION_DENIED, UNPERMITTED.format(tool=record["tool"], item=item["type"], id=item.get("id")),
                              UNPERMITTED_NEXT.format(call_id=record["call_id"]))
        elif over is not None:
            stopping = ending(over.code, OVER_BUDGET.format(tool=record["tool"], item=item["type"], id=item.get("id"), exhausted=over.message),
                              over.next_safe_action, dimension=over.dimension)
    update: LoopUpdate = {"observations": observations, "usage": usage}
    if stopping:
        update["ending"] = stopping
    return update


def admit_requests(state: Mapping[str, Any], reply: AIMessage, turn: int, usage: Mapping[str, Any]) -> dict[str, Any]:
    """The gate's decisions on a reply's approval requests: `messages` (the answers given now),
    `observations`, `asks` (for the approve node), `usage` (what approved calls reserve), `ending`.
    `usage` is the run's usage with this turn's reservations so far."""
    offers = {entry["name"]: entry for entry in (state.get("boundary") or {}).get("hosted") or [] if entry["type"] == hosted.CONNECTOR}
    rules = gateway.run_policy(state["settings"], state["task"]["profile"])
    budget = Budget.model_validate(state["budget"])
    timeout_s = state["settings"].get("approval_timeout_s")
    answers: list[str | dict[Any, Any]]
    reserved: Usage
    answers, observations, asks, reserved, stopping = [], [], [], {}, None
    for position, request in enumerate(approval_requests(reply)):
        label, tool, raw = str(request.get("server_label")), str(request.get("name")), request.get("arguments")
        args = _arguments(raw)
        entry = offers.get(label)
        side_effect = True if entry is None else hosted.from_offer(entry).has_side_effect(tool)
        call: dict[str, Any] = {"call_id": f"m{turn}.{position}", "tool_call_id": str(request.get("id")), "name": qualified_name(label, tool),
                "server": label, "tool": tool, "args": args if isinstance(args, dict) else {"_": raw},
                "args_hash": breakers.arguments_hash(args if isinstance(args, dict) else {"_": raw}), "side_effect": side_effect,
                "reversibility": REVERSIBILITY if side_effect else "pure", "hosted": True, "provider_id": str(request.get("id"))}
        refusal, decision, exhaustion = _refusal(entry, label, tool, args, raw, offers), None, None
        if refusal is None and entry is not None:  # no refusal: the connector is offered
            decision = policies.decide(rules, hosted.from_offer(entry).spec(tool), args)
            call["rule"] = decision.rule_id
            if decision.action == "deny":
                refusal = ("denied", f"denied: {decision.reason}")
            elif exhaustion := check_before_tool_call(add_usage(usage, reserved), budget, tool=call["name"], server=label, has_side_effect=side_effect):
                refusal = ("budget_exceeded", f"budget_exceeded: {exhaustion.message} {exhaustion.next_safe_action}")
                stopping = stopping or ending(Terminal.BUDGET_EXHAUSTED, exhaustion.message, exhaustion.next_safe_action, dimension=exhaustion.dimension)
        observation = {**_intended(call), "stage": "intended", "status": "pending"}
        reservation = tool_call_reservation(tool=call["name"], server=label, has_side_effect=side_effect)
        if refusal is not None:
            answers.append(_answer(call, False, refusal[1]))
            observation.update(status=refusal[0], detail=refusal[1], decision=refusal[0], approved=False)
        elif decision is not None and decision.action == "allow":
            answers.append(_answer(call, True, None))
            reserved = add_usage(reserved, reservation)
            observation.update(decision="allow", approved=True)
        else:
            asks.append({**call, "reason": decision.reason if decision else None, "reservation": reservation,
                         "expires_at": None if timeout_s is None else time.time() + timeout_s})
            observation.update(decision="ask")
        observations.append(observation)
    update: dict[str, Any] = {"messages": [HumanMessage(content=answers)] if answers else [], "observations": observations,
                              "asks": asks, "usage": reserved}
    if stopping:
        update["ending"] = stopping
    return update


def answer_decision(call: dict[str, Any], approved: bool, reason: str | None, approver: str | None) -> LoopUpdate:
    """The approve node's update for a hosted call: the `mcp_approval_response` item, the observation,
    and on approval the reservation the gate made."""
    observation: Observation = {"call_id": call["call_id"], "approved": approved, "approver": approver,
                                   "decision": "approved" if approved else "rejected"}
    if not approved:
        observation.update({"status": "rejected", "detail": reason})
    update: LoopUpdate = {"messages": [HumanMessage(content=[_answer(call, approved, reason)])], "observations": [observation]}
    if approved:
        update["usage"] = add_usage(None, call.get("reservation"))
    return update


async def _account(
    item: dict[str, Any], fresh_id: str, offers: dict[str, dict[str, Any]], decided: dict[str, dict[str, Any]],
    settings: dict[str, Any], services: Services,
) -> tuple[Observation, Usage]:
    """One reported call: its observation (with the ledger key when it has side effects) and its usage delta."""
    kind = hosted.ITEM_TYPES[item["type"]]
    entry = _entry_for(kind, item, offers)
    tool = str(item.get("name")) if kind == hosted.CONNECTOR else (entry["type"] if entry else kind)
    server = entry["name"] if entry else str(item.get("server_label") or "provider")
    args = _reported_arguments(kind, item)
    linked = decided.get(item.get("approval_request_id") or "")
    call_id = linked["call_id"] if linked else fresh_id
    side_effect = True if entry is None else hosted.from_offer(entry).has_side_effect(tool if kind == hosted.CONNECTOR else None)
    status = _status(item)
    text = _output(kind, item)
    excerpt, truncated = dispatch.bound_text(text, settings.get("max_result_chars", 4_000))
    pointer = await store.put_payload(await services.pool(), current_run_id(), call_id, text) if truncated else None
    name = qualified_name(server, tool)
    args_hash = breakers.arguments_hash(args)
    permitted, rule = _permitted(entry, kind, tool, linked)
    now = time.time()
    record: Observation = {
        "call_id": call_id, "tool_call_id": str(item.get("id")), "tool": name, "server": server, "args_hash": args_hash,
        "side_effect": side_effect, "reversibility": REVERSIBILITY if side_effect else "pure", "rule": rule, "phase": "act",
        "stage": "observed" if status != "incomplete" else "attempted", "status": status,
        "detail": f"run by the provider ({item['type']} {item.get('id')}, status {item.get('status')})",
        "excerpt": excerpt[:1_000], "truncated": truncated, "pointer": pointer, "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "chars": len(text), "latency_ms": 0.0, "attempts": 1, "started_at": now, "ended_at": now, "hosted": True,
        "provider_item": item["type"], "grounded": True, "permitted": permitted,
        "instructions": instruction_cues(text) if status in ("ok", "tool_error") else [],  # the safety breaker reads these
        "ledger_key": await _ledger(call_id, name, server, tool, args, args_hash, status, item, excerpt, services) if side_effect else None,
    }
    delta: Usage = {"tool_result_chars": len(excerpt)}
    if not (linked and linked.get("approved")):  # an approved call was reserved when it was approved
        delta = add_usage(delta, tool_call_reservation(tool=name, server=server, has_side_effect=side_effect))
    price = tool_call_price_of(settings, item["type"])
    delta = add_usage(delta, {"cost_usd": price} if price is not None else {"unpriced_tool_calls": 1})
    langsmith_trace.hosted_tool_run({**record, "args_hash": args_hash, "decision": "approved" if linked else "offered"})
    return record, delta


async def _ledger(call_id: str, name: str, server: str, tool: str, args: dict[str, Any], args_hash: str, status: str,
                  item: dict[str, Any], excerpt: str, services: Services) -> str:
    """Record a hosted side effect after the fact; a re-run act step (after a crash) finds its entry."""
    run_id, pool = current_run_id(), await services.pool()
    key = idempotency_key(run_id, None, call_id, args_hash)
    entry, _ = await store.claim_intent(pool, idempotency_key=key, thread_id=run_id, call_id=call_id, step_id=None,
                                        tool=tool, server=server, args_hash=args_hash)
    if entry.status != "INTENT" or status == "incomplete":  # incomplete: it may or may not have happened — INTENT says so
        return key
    if status == "ok":
        await store.write_complete(pool, key, {"hosted": True, "reversibility": REVERSIBILITY, "provider_item": item["type"],
                                               "provider_id": item.get("id"), "arguments": args, "text": excerpt, "structured": None})
    else:
        await store.write_abort(pool, key, excerpt or f"{name} failed at the provider")
    return key


def _refusal(entry: dict[str, Any] | None, label: str, tool: str, args: Any, raw: Any, offers: dict[str, Any]) -> tuple[str, str] | None:
    if entry is None or not entry["offered"]:
        return "denied", UNKNOWN_CONNECTOR.format(label=label, offered=", ".join(sorted(name for name, e in offers.items() if e["offered"])) or "none")
    if entry.get("tools") is not None and tool not in entry["tool"].get("allowed_tools", []):
        return "denied", NOT_OFFERED_TOOL.format(tool=tool, label=label)
    if not isinstance(args, dict):
        return "invalid_arguments", BAD_ARGUMENTS.format(tool=qualified_name(label, tool), raw=str(raw)[:200])
    return None


def _permitted(entry: dict[str, Any] | None, kind: str, tool: str, linked: dict[str, Any] | None) -> tuple[bool, str | None]:
    """Whether the run let the provider make this call (offered; for a connector tool that needs
    approval, approved), and the rule that did."""
    if entry is None or not entry["offered"]:
        return False, None
    if kind != hosted.CONNECTOR:
        return True, entry["rule"]
    if linked is not None:
        return bool(linked.get("approved")), linked.get("rule")
    per_tool = (entry.get("tools") or {}).get(tool)
    return bool(per_tool and per_tool["decision"] == "allow"), per_tool["rule"] if per_tool else None


def _entry_for(kind: str, item: dict[str, Any], offers: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    if kind == hosted.CONNECTOR:
        entry = offers.get(str(item.get("server_label")))
        return entry if entry and entry["type"] == hosted.CONNECTOR else None
    return next((entry for entry in offers.values() if entry["type"].startswith(kind)), None)


def _offered_name(entry: dict[str, Any]) -> str:
    return qualified_name(entry["name"], entry["type"] if entry["type"] != hosted.CONNECTOR else "*")


def _arguments(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        return None


def _reported_arguments(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    if kind == hosted.CONNECTOR:
        args = _arguments(item.get("arguments"))
        return args if isinstance(args, dict) else {"_": item.get("arguments")}
    keys = {"web_search": ("action",), "file_search": ("queries",), "code_interpreter": ("code", "container_id")}[kind]
    return {key: item.get(key) for key in keys}


def _status(item: dict[str, Any]) -> str:
    """ok, tool_error, or incomplete (sent, no outcome: it may or may not have happened)."""
    if item.get("error") or item.get("status") == "failed":
        return "tool_error"
    return "ok" if item.get("status") in (None, "completed") else "incomplete"


def _output(kind: str, item: dict[str, Any]) -> str:
    if kind == hosted.CONNECTOR:
        error = item.get("error")
        return str(error.get("message", error) if isinstance(error, dict) else error) if error else str(item.get("output") or "")
    value = {"web_search": item.get("action"), "file_search": item.get("results"), "code_interpreter": item.get("outputs")}[kind]
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _intended(call: dict[str, Any]) -> dict[str, Any]:
    keys = ("call_id", "tool_call_id", "server", "args_hash", "side_effect", "reversibility", "rule", "provider_id")
    return {"tool": call["name"], **{key: call.get(key) for key in keys}, "phase": "act", "hosted": True}


def _answer(call: dict[str, Any], approve: bool, reason: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": RESPONSE, "approval_request_id": call["provider_id"], "approve": approve}
    if reason:
        item["reason"] = reason
    return item
