"""calls: the permission-and-budget wrapper every tool call passes right before it is sent.

`run_call` is the last word on a call that act's gate admitted earlier in the turn: it starts the
run's servers if needed, refuses a call held for a dependency that did not get done, asks the
policy again on what the call reaches now (a symlink or a rename made since the gate — by an
earlier call, another process, or during a long approval — cannot carry it into a denied
resource), checks the tool is still defined as it was pinned, writes the ledger's intent for a side
effect, dispatches under the run's write lock, and records exactly one result: one tool message,
one observation, the usage. `record_outcome` is that recording, shared by every node that ends a
call (execute, retrieve, verify, approve's `respond`).

The gate decides in the model's turn (registry, arguments, policy, budget reservation, breakers,
approvals, waves); this wrapper re-decides at dispatch what may have changed since. Both exist
because time passes between them: approvals, earlier waves and other processes run in between.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from langchain_core.messages import ToolMessage

from boundloop.graph.core import deadline
from boundloop.graph.calls import elicitation, scope as mcp_scope
from boundloop.graph.core.budget import add_usage, tool_call_reservation
from boundloop.graph.core.records import Observation, Usage
from boundloop.graph.models import write_ahead
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopUpdate
from boundloop.tools import client_features, dispatch, gateway, ledger, pinning
from boundloop.tools.outcome import CallOutcome


DENIED_AT_DISPATCH = "denied: {name} now reaches a resource it may not ({rule}: {reason}). The call was not made."
OUT_OF_TIME = "not sent: the run's wall-clock budget ran out before this call's turn came."
NO_RESPONSE = frozenset({"timeout", "server_unavailable", "cancelled", "unknown_after_crash"})
"""Outcomes of a call that was sent but never answered: the ladder stops at `attempted`."""


async def run_call(call: dict[str, Any], payload: dict[str, Any], services: Services, *, phase: str) -> LoopUpdate:
    """Dispatch one call and turn its outcome into exactly one tool message, one observation, usage.

    The run's servers start here at the latest (a resumed run plans and acts without them), and the
    call goes out only if its server still defines the tool as it was pinned at intake.
    """
    started = time.time()  # before the servers start: a lazy start is wall time the run spends
    run_id = current_run_id()
    settings = payload["settings"]
    if unmet := payload.get("unmet"):
        return await _refuse_unmet(call, unmet, settings, services, started)
    if deadline.passed():  # e.g. an approval whose wait was charged: nothing is sent, nothing is unknown
        return await record_outcome(call, CallOutcome("budget_exceeded", text=OUT_OF_TIME, detail=OUT_OF_TIME), settings, services, started=started, phase=phase, chars_left=payload.get("result_chars_left"))
    try:  # a lazy start of the servers is wall time too: it ends at the step's deadline
        bridge = await asyncio.wait_for(services.bridge(run_id, settings), deadline.seconds_left())
        registry = await asyncio.wait_for(services.registry(run_id, settings, payload.get("tools")), deadline.seconds_left())
    except TimeoutError:
        if not deadline.passed():
            raise
        return await record_outcome(call, CallOutcome("budget_exceeded", text=OUT_OF_TIME, detail=OUT_OF_TIME), settings, services, started=started, phase=phase, chars_left=payload.get("result_chars_left"))
    spec = gateway.relied_spec(registry, call)
    assert spec is not None, "the gate admitted the call from this same pinned registry"
    verdict = await asyncio.to_thread(gateway.permission, gateway.run_policy(settings, payload["profile"]), spec, call["args"])
    if verdict.action == "deny":
        text = DENIED_AT_DISPATCH.format(name=call["name"], rule=verdict.rule_id, reason=verdict.reason)
        return await record_outcome(call, CallOutcome("denied", text=text, detail=text), settings, services, started=started, phase=phase, chars_left=payload.get("result_chars_left"))

    vouches = phase == "verify"  # a check of the run's result rests on no standing listing (pinning.changed)
    rechecked = pinning.RecheckedRetries(bridge, spec, vouches=vouches)  # send_once checks the first send; this, every retry and re-send

    async def send(arguments: dict[str, Any]) -> CallOutcome:
        return await dispatch.call_with_retry(
            rechecked, spec, arguments,
            timeout_s=settings.get("tool_timeout_s", 30.0),
            max_attempts=1 + max(payload.get("retries_left", 0), 0),
        )

    scope = mcp_scope.for_call(call, payload, services)  # what the server may ask of the run meanwhile
    key = ledger.idempotency_key(run_id, call.get("step_id"), call["call_id"], call["args_hash"]) if call.get("side_effect") else None

    async def send_once() -> CallOutcome:
        if refusal := await pinning.changed(bridge, spec, vouches=vouches):
            return refusal
        if key is None:
            return await send(call["args"])
        async with services.write_lock(run_id):
            return await ledger.run_once(await services.pool(), key=key, run_id=run_id, call=call, spec=spec, step_id=call.get("step_id"),
                                         send=send, answered=frozenset(scope.answers))

    pool = await services.pool()
    questions = elicitation.Questions(call, scope, pool, run_id, user=settings.get("user"),
                                      repeats_blindly=key is not None and not ledger.safe_to_repeat(spec),
                                      may_be_recorded=lambda: services.questions_may_be_recorded(run_id))
    with client_features.calling(scope):
        while True:  # until the server has no question left unanswered; each new one interrupts the run
            await questions.answer_recorded()
            outcome = await client_features.until_question(scope, send_once())
            if outcome is not None:
                break
            if key is not None:
                assert scope.question is not None, "until_question returned None: a question is waiting"
                await ledger.stop_for_question(pool, key, scope.question["key"])
            await questions.record(phase)
            services.question_recorded(run_id)  # this call's next look, and every later call of the drive, asks
    if bridge.features(spec.server).allow_sampling and (recovered := await write_ahead.charge_earlier(pool)):
        scope.spent["usage"] = add_usage(scope.spent.get("usage"), recovered)  # a re-run step's call that sampled before and not now
    result = await record_outcome(call, outcome, settings, services, started=started, phase=phase, chars_left=payload.get("result_chars_left"))
    return await mcp_scope.settle(scope, result, services, phase=phase)


async def _refuse_unmet(call: dict[str, Any], text: str, settings: dict[str, Any], services: Services, started: float) -> LoopUpdate:
    """Refuse a held call whose dependency did not get done: nothing sent, the gate's reservation refunded."""
    update = await record_outcome(call, CallOutcome("dependency_unmet", text=text, detail=text), settings, services, started=started, phase="act")
    update["observations"][0]["stage"] = "intended"
    reserved = tool_call_reservation(tool=call["name"], server=call.get("server", ""), has_side_effect=bool(call.get("side_effect")))
    refund = {key: ({name: -count for name, count in value.items()} if isinstance(value, dict) else -value) for key, value in reserved.items()}
    update["usage"] = add_usage(update["usage"], refund)
    return update


async def record_outcome(
    call: dict[str, Any], outcome: CallOutcome, settings: dict[str, Any], services: Services, *, started: float, phase: str,
    chars_left: int | None = None,
) -> LoopUpdate:
    """Bound the payload for the model, store the full payload when cut, and ground the observation.
    `chars_left` is this call's share of the `tool_result_chars` budget (None: no cap): the excerpt
    never passes it, so the cap holds after the call as well as before it."""
    excerpt, truncated = bounded(outcome.text, settings.get("max_result_chars", 4_000), chars_left)
    pointer = None
    if truncated:
        from boundloop.checkpoints.store import put_payload

        pointer = await put_payload(await services.pool(), current_run_id(), call["call_id"], outcome.text)
    text = gateway.model_text(outcome, excerpt, truncated, call.get("warning"))
    message = ToolMessage(text, tool_call_id=call["tool_call_id"], name=call["name"], status="success" if outcome.ok else "error")
    observation: Observation = {
        "call_id": call["call_id"],
        "tool_call_id": call["tool_call_id"],
        "tool": call["name"],
        "server": call.get("server"),
        "args_hash": call["args_hash"],
        "side_effect": call.get("side_effect"),
        "rule": call.get("rule"),
        "phase": phase,
        "stage": "attempted" if outcome.status in NO_RESPONSE else "observed",
        "status": outcome.status,
        "detail": outcome.detail,
        "excerpt": excerpt[:1_000],
        "truncated": truncated,
        "pointer": pointer,
        "sha256": hashlib.sha256(outcome.text.encode()).hexdigest(),
        "chars": len(outcome.text),
        "latency_ms": round(outcome.latency_ms, 3),
        "attempts": outcome.attempts,
        "started_at": started,
        "ended_at": time.time(),
    }
    usage: Usage = {"tool_result_chars": len(excerpt), "retries": max(outcome.attempts - 1, 0)}
    return {"messages": [message], "observations": [observation], "usage": usage}


def bounded(text: str, max_chars: int, chars_left: int | None) -> tuple[str, bool]:
    """(the excerpt the model reads, whether it was cut): at most `max_chars`, and at most `chars_left`.
    Too few characters left for the cut marker: the plain head of the text, or nothing."""
    limit = max_chars if chars_left is None else min(max_chars, chars_left)
    if limit >= dispatch.MIN_BOUND_CHARS:
        return dispatch.bound_text(text, limit)
    return text[: max(limit, 0)], len(text) > max(limit, 0)
