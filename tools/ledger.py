"""ledger: run a side-effecting call at most once per idempotency key, across crashes and resumes.

Write-ahead: INTENT is recorded before the call is sent, COMPLETE or ABORT once it is answered.
ABORT means "answered with a failure, or never sent": the effect did not happen. A call that was
sent but never answered (`timeout`, `server_unavailable` after dispatch, a cancel) may have taken
effect, so it is not ABORT: a tool that is safe to repeat (idempotent, or one that takes our
idempotency key) is re-sent with the same key, up to `RESENDS` times (the bridge reconnects a
dead server first); if it stays unanswered, or any other tool, its INTENT stays without outcome
and the call becomes `unknown_after_crash`, which sends the run to a human review; a rollback
lists it for manual checking.
On a resumed run the ledger answers first:
  COMPLETE → the stored result is reused; the tool is not called again;
  ABORT    → the stored failure is returned (a failed call, as before the crash);
  INTENT   → the outcome is unknown; handled as an unanswered call above — unless the call was
             stopped for a server's question (`stop_for_question`, graph/calls/elicitation.py) and that
             question is now answered: then it is sent again, once, even when not safe to repeat.
             That rests on servers asking before they act (the 2026-07-28 protocol's
             `input_required` ends the request, so there nothing happened yet); the question the
             human answered says the call will be sent again, so the re-send is never silent. The
             mark is cleared before the re-send: a crash during it leaves a plain INTENT.
Never decides permission or budget; the gate did that before the call reached here.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Awaitable, Callable

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import store
from boundloop.graph.core import deadline
from boundloop.graph.core.faults import crash_point, crash_while
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolSpec

KEY_ARGUMENT = "idempotency_key"
UNKNOWN_AFTER_CRASH = (
    "unknown_after_crash: {tool} was sent before a crash and its outcome was never recorded; "
    "it is not safe to send again. A human must check whether it took effect."
)
UNANSWERED = (
    "unknown_after_crash: {tool} was sent but never answered ({why}), so it may or may not have taken "
    "effect; it was not sent again. Do not repeat it: a human must check whether it took effect."
)
REUSED = "result reused from the ledger; the tool was not called again"
NOT_ANSWERED = frozenset({"timeout", "server_unavailable", "cancelled"})
RESENDS = 2
"""Re-sends, with the same key, of a repeatable call that was sent and not answered."""


def idempotency_key(run_id: str, step_id: str | None, call_id: str, args_hash: str) -> str:
    """Derived from the run, the plan step, the call's position and its normalized arguments.

    Never from the model's tool_call_id: models mint new ids when they retry. The call's position
    (`call_id`, e.g. `a3.1`) comes from checkpointed state, so it is the same after a resume.
    """
    material = "\x1f".join([run_id, step_id or "", call_id, args_hash])
    return "bl-" + hashlib.sha256(material.encode()).hexdigest()[:40]


def takes_key(spec: ToolSpec) -> bool:
    return KEY_ARGUMENT in (spec.input_schema or {}).get("properties", {})


def safe_to_repeat(spec: ToolSpec) -> bool:
    """A call whose outcome is unknown may be sent again only if repeating it cannot double it,
    and only a trusted server is believed about that (idempotent hint or honouring our key)."""
    return spec.trusted and (spec.hints.idempotent or takes_key(spec))


Send = Callable[[dict[str, Any]], Awaitable[CallOutcome]]
STOPPED = "stopped_for_question"
"""The key, in an INTENT entry's `result`, of the question the call was cancelled for."""


async def stop_for_question(pool: AsyncConnectionPool, key: str, question_key: str) -> None:
    """Mark the call's INTENT as cancelled while the server waited for an answer to `question_key`."""
    await store.mark_intent(pool, key, {STOPPED: question_key})


async def run_once(
    pool: AsyncConnectionPool, *, key: str, run_id: str, call: dict[str, Any], spec: ToolSpec, step_id: str | None, send: Send,
    answered: frozenset[str] = frozenset(),
) -> CallOutcome:
    """Send `call` through `send` unless the ledger already knows how it ended. `answered`: the keys
    of the server's questions a human has answered for this call."""
    crash_point("tool:before_intent")
    entry, fresh = await store.claim_intent(pool, idempotency_key=key, thread_id=run_id, call_id=call["call_id"], step_id=step_id,
                                            tool=spec.name, server=spec.server, args_hash=call["args_hash"])
    if entry.status == "COMPLETE":
        return CallOutcome("ok", text=entry.result["text"], structured=entry.result.get("structured"), detail=REUSED)
    if entry.status == "ABORT":
        return CallOutcome("tool_error", text=entry.error or "", detail="failure recorded in the ledger before a resume")
    stopped_for = (entry.result or {}).get(STOPPED) if entry.status == "INTENT" else None
    if stopped_for is not None and stopped_for in answered:
        await store.mark_intent(pool, key, None)
    elif not fresh and not safe_to_repeat(spec):
        return CallOutcome("unknown_after_crash", text=UNKNOWN_AFTER_CRASH.format(tool=call["name"]), detail=f"ledger key {key}")
    crash_point("tool:after_intent")
    arguments = {**call["args"], KEY_ARGUMENT: key} if takes_key(spec) else call["args"]
    async with crash_while("tool:during_call"):
        outcome = await send(arguments)
    crash_point("tool:after_call")
    unknown, attempts, latency_ms = _unanswered(outcome), outcome.attempts, outcome.latency_ms
    for _ in range(RESENDS if safe_to_repeat(spec) else 0):
        if not unknown or deadline.passed():
            break
        again = await send(arguments)  # the same key: a server that already did it answers with the first result
        attempts, latency_ms = attempts + again.attempts, latency_ms + again.latency_ms
        if again.attempts > 0:  # not sent at all (the server could not be reached) leaves it unknown
            outcome, unknown = again, _unanswered(again)
    if unknown:
        why = outcome.detail or outcome.status
        text = UNANSWERED.format(tool=call["name"], why=why)
        return CallOutcome("unknown_after_crash", text=text, latency_ms=latency_ms, attempts=attempts,
                           detail=f"{outcome.status}: {why}; ledger key {key} stays INTENT")
    if outcome.ok:
        # The arguments sent are kept with the result: compensating the call needs both.
        await store.write_complete(pool, key, {"text": outcome.text, "structured": outcome.structured, "arguments": arguments})
    else:
        await store.write_abort(pool, key, outcome.text or outcome.detail)
    return dataclasses.replace(outcome, attempts=attempts, latency_ms=latency_ms)


def _unanswered(outcome: CallOutcome) -> bool:
    """Sent, or perhaps sent, and no answer came: the effect may or may not have happened."""
    return outcome.status in NOT_ANSWERED and not (outcome.status == "server_unavailable" and outcome.attempts == 0)
