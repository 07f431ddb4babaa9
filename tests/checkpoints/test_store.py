"""Typed reads and writes of the run registry, the trace, the observation store and the ledger."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import (
    LedgerConflict,
    append_trace,
    get_ledger_entry,
    get_payload,
    get_run,
    list_runs,
    put_payload,
    read_trace,
    upsert_run,
    write_abort,
    write_complete,
    write_intent,
)
from boundloop.checkpoints.store import append_events, get_call_payload, put_payloads, trace_chain_problems

RUN = dict(goal="summarise the report", profile="research", task_hash="th-1")
CALL = dict(thread_id="t-1", call_id="c-1", step_id="s-1", tool="write_file", server="workspace",
            args_hash="ah-1")


async def test_a_registered_run_reads_back_as_written(pool: AsyncConnectionPool) -> None:
    written = await upsert_run(pool, thread_id="t-1", status="plan", **RUN)
    assert await get_run(pool, "t-1") == written
    assert (written.goal, written.status, written.result, written.error) == (
        "summarise the report", "plan", None, None)


async def test_upserting_a_run_again_updates_it_and_keeps_created_at(
    pool: AsyncConnectionPool,
) -> None:
    first = await upsert_run(pool, thread_id="t-1", status="plan", **RUN)
    ended = await upsert_run(pool, thread_id="t-1", status="SUCCESS", result={"answer": 42}, **RUN)
    assert (ended.status, ended.result, ended.created_at) == ("SUCCESS", {"answer": 42},
                                                              first.created_at)
    assert ended.updated_at >= first.updated_at


async def test_list_runs_gives_the_newest_first_up_to_the_limit(pool: AsyncConnectionPool) -> None:
    for thread_id in ("t-1", "t-2", "t-3"):
        await upsert_run(pool, thread_id=thread_id, status="plan", **RUN)
    assert [r.thread_id for r in await list_runs(pool, limit=2)] == ["t-3", "t-2"]


async def test_an_unknown_run_is_none(pool: AsyncConnectionPool) -> None:
    assert await get_run(pool, "nope") is None


async def test_trace_events_read_back_in_append_order(pool: AsyncConnectionPool) -> None:
    await append_trace(pool, "t-1", "phase", node="plan", data={"steps": 2})
    await append_trace(pool, "t-2", "phase", node="plan")
    await append_trace(pool, "t-1", "terminal", data={"status": "SUCCESS"})
    events = await read_trace(pool, "t-1")
    assert [(e.kind, e.node, e.data) for e in events] == [
        ("phase", "plan", {"steps": 2}),
        ("terminal", None, {"status": "SUCCESS"}),
    ]
    assert events[0].id < events[1].id


async def test_events_appended_at_once_from_many_connections_form_one_unbroken_hash_chain(pool: AsyncConnectionPool) -> None:
    """Eight writers append to one run at the same time, singly and in batches: every event lands
    in one chain (one start, no fork, no gap), and each hash covers its event's content."""
    run_id = f"chain-{uuid.uuid4().hex[:8]}"

    async def writer(number: int) -> None:
        for i in range(10):
            if i % 2:
                await append_trace(pool, run_id, "node", node=f"w{number}", data={"i": i})
            else:
                await append_events(pool, run_id, [("call", f"w{number}", {"i": i, "part": part}) for part in range(3)])

    await asyncio.gather(*(writer(n) for n in range(8)))
    events = await read_trace(pool, run_id)
    assert len(events) == 8 * (5 + 15)
    assert await trace_chain_problems(pool, run_id) == []
    by_prev = {event.prev_hash: event for event in events}
    assert len(by_prev) == len(events)  # no two events follow the same one
    walked, head = 0, None
    while head in by_prev:
        head, walked = by_prev[head].hash, walked + 1
    assert walked == len(events)


async def test_a_payload_reads_back_through_its_pointer_with_hash_and_size(
    pool: AsyncConnectionPool,
) -> None:
    body = "é" * 10_000
    pointer = await put_payload(pool, "t-1", "c-1", body)
    payload = await get_payload(pool, pointer)
    assert payload is not None
    assert pointer.startswith("payload:")
    assert (payload.pointer, payload.body, payload.chars) == (pointer, body, 10_000)
    assert payload.sha256 == hashlib.sha256(body.encode()).hexdigest()


async def test_payloads_stored_together_each_read_back_by_call_id(pool: AsyncConnectionPool) -> None:
    bodies = [("c-1", "first"), ("c-2", "nul \x00 inside"), ("compaction:1", "[]")]
    await put_payloads(pool, "t-1", bodies)
    for call_id, body in bodies:
        payload = await get_call_payload(pool, "t-1", call_id)
        assert payload is not None and payload.chars == len(body), call_id
        assert payload.sha256 == hashlib.sha256(body.encode()).hexdigest()  # of the body as given
    assert (await get_call_payload(pool, "t-1", "c-2")).body == "nul \ufffd inside"


async def test_payloads_stored_together_are_all_stored_or_none(pool: AsyncConnectionPool) -> None:
    """One row the database refuses leaves none of the batch: a compaction retried after the failure
    does not find half of its archive stored."""
    async with pool.connection() as conn:
        await conn.execute("CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                           "IF NEW.call_id = 'bad' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")
        await conn.execute("CREATE TRIGGER refuse_bad BEFORE INSERT ON boundloop_payloads FOR EACH ROW EXECUTE FUNCTION refuse_bad()")
    with pytest.raises(psycopg.errors.RaiseException):
        await put_payloads(pool, "t-1", [("c-1", "first"), ("bad", "second"), ("c-3", "third")])
    assert [await get_call_payload(pool, "t-1", call_id) for call_id in ("c-1", "bad", "c-3")] == [None, None, None]


async def test_a_pointer_to_nothing_stored_is_none(pool: AsyncConnectionPool) -> None:
    assert await get_payload(pool, "payload:00000000-0000-0000-0000-000000000000") is None


async def test_a_malformed_pointer_is_refused_with_the_expected_form(
    pool: AsyncConnectionPool,
) -> None:
    with pytest.raises(ValueError) as caught:
        await get_payload(pool, "s3://bucket/key")
    assert str(caught.value) == (
        "payload pointer 's3://bucket/key' is malformed; expected 'payload:<uuid>' as returned "
        "by put_payload"
    )


async def test_an_intent_becomes_complete_with_its_result(pool: AsyncConnectionPool) -> None:
    intent = await write_intent(pool, idempotency_key="k-1", **CALL)
    complete = await write_complete(pool, "k-1", {"written": 12})
    assert intent.status == "INTENT"
    assert (complete.status, complete.result, complete.error) == ("COMPLETE", {"written": 12}, None)
    assert await get_ledger_entry(pool, "k-1") == complete


async def test_an_intent_becomes_abort_with_its_error(pool: AsyncConnectionPool) -> None:
    await write_intent(pool, idempotency_key="k-1", **CALL)
    aborted = await write_abort(pool, "k-1", "timeout after 30 s")
    assert (aborted.status, aborted.result, aborted.error) == ("ABORT", None, "timeout after 30 s")


async def test_writing_the_intent_again_returns_the_stored_outcome(
    pool: AsyncConnectionPool,
) -> None:
    """A resumed run re-enters the call; it must see COMPLETE and reuse the result."""
    await write_intent(pool, idempotency_key="k-1", **CALL)
    complete = await write_complete(pool, "k-1", {"written": 12})
    assert await write_intent(pool, idempotency_key="k-1", **CALL) == complete


async def test_a_second_outcome_for_one_intent_is_a_conflict(pool: AsyncConnectionPool) -> None:
    await write_intent(pool, idempotency_key="k-1", **CALL)
    await write_complete(pool, "k-1", {"written": 12})
    with pytest.raises(LedgerConflict) as caught:
        await write_abort(pool, "k-1", "late failure")
    assert str(caught.value) == (
        "ledger entry 'k-1' cannot become ABORT: it has status COMPLETE; only an INTENT can take "
        "an outcome. Fix: write_intent first, and read the stored outcome with get_ledger_entry "
        "instead of writing a second one."
    )


async def test_an_outcome_without_an_intent_is_a_conflict(pool: AsyncConnectionPool) -> None:
    with pytest.raises(LedgerConflict) as caught:
        await write_complete(pool, "k-404", None)
    assert str(caught.value).startswith(
        "ledger entry 'k-404' cannot become COMPLETE: it has no entry;"
    )
