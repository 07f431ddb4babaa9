"""The ledger's rule for a side-effecting call stopped for a server's question: sent again only
for the answered question, once; otherwise unknown, as any call cut off mid-flight."""

from __future__ import annotations

from typing import Any

from boundloop.checkpoints import store
from boundloop.tools import ledger
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolHints, ToolSpec

WRITE = ToolSpec(server="asking", name="note", description="", input_schema={"type": "object"}, trusted=True,
                 hints=ToolHints(read_only=False, destructive=False, idempotent=False, open_world=False, annotated=True))
CALL = {"call_id": "a1.1", "name": "asking__note", "args": {"text": "hello"}, "args_hash": "h"}


async def _stopped(pool: Any, key: str) -> list[dict[str, Any]]:
    """A call whose INTENT is written and which was stopped for question `q` (graph/calls/elicitation.py)."""
    await store.claim_intent(pool, idempotency_key=key, thread_id="r", call_id="a1.1", step_id=None, tool="note", server="asking", args_hash="h")
    await ledger.stop_for_question(pool, key, "q")
    return []


async def test_only_the_answered_question_sends_a_non_idempotent_call_again(pool) -> None:
    sent = await _stopped(pool, "k-answered")

    async def send(arguments: dict[str, Any]) -> CallOutcome:
        sent.append(arguments)
        return CallOutcome("ok", text="noted", attempts=1)

    common = dict(key="k-answered", run_id="r", call=CALL, spec=WRITE, step_id=None, send=send)
    unanswered = await ledger.run_once(pool, **common, answered=frozenset({"another question"}))
    assert unanswered.status == "unknown_after_crash" and not sent
    answered = await ledger.run_once(pool, **common, answered=frozenset({"q"}))
    assert answered.text == "noted" and sent == [{"text": "hello"}]
    again = await ledger.run_once(pool, **common, answered=frozenset({"q"}))
    assert again.detail == ledger.REUSED and len(sent) == 1


async def test_a_crash_during_the_resend_leaves_a_plain_intent_that_is_not_sent_a_third_time(pool) -> None:
    sent = await _stopped(pool, "k-crash")

    async def crash(arguments: dict[str, Any]) -> CallOutcome:
        sent.append(arguments)
        raise KeyboardInterrupt  # the process dies while the re-sent call is in flight

    common = dict(key="k-crash", run_id="r", call=CALL, spec=WRITE, step_id=None, answered=frozenset({"q"}))
    try:
        await ledger.run_once(pool, **common, send=crash)
    except KeyboardInterrupt:
        pass
    entry = await store.get_ledger_entry(pool, "k-crash")
    assert entry is not None and entry.status == "INTENT" and entry.result is None
    after = await ledger.run_once(pool, **common, send=crash)
    assert after.status == "unknown_after_crash" and len(sent) == 1
