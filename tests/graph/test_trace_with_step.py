"""A step's trace events are written with the step: in the transaction that saves its result, at no
round trip of their own. A kill between a node's settling and its save leaves neither; the re-run
writes them once."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from boundloop.checkpoints import store
from boundloop.checkpoints.pending_trace import TaskKey
from boundloop.checkpoints.saver import postgres_saver
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, boundloop

STEP_EVENTS = ("node", "call", "interrupt")
UNSAVED_WITH_A_STEP = """
SELECT t.kind, t.node, t.data ->> 'step' FROM boundloop_trace AS t
WHERE t.thread_id = %(t)s AND t.kind = ANY(%(kinds)s)
  AND NOT EXISTS (SELECT 1 FROM checkpoint_writes AS w WHERE w.thread_id = t.thread_id AND w.xmin::text = t.xmin::text)
  AND NOT EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = t.thread_id AND c.xmin::text = t.xmin::text)"""
"""Step events whose transaction (xmin) saved no write and no checkpoint of their run."""


def _count(db_url: str, sql: str, *params: object) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


def test_a_kill_after_a_node_settled_but_before_its_save_leaves_neither_and_the_rerun_writes_it_once(db_url, tmp_path):
    _, servers, script = _crash_task(tmp_path, "unsaved", slow_s=0.1)
    crashed = subprocess.run([BOUNDLOOP, *_run_args(servers, script, "unsaved", db_url)], env=_env(BOUNDLOOP_CRASH_AT="leave:act#1"),
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert _count(db_url, "SELECT count(*) FROM boundloop_trace WHERE thread_id = 'unsaved' AND node = 'validate_plan'") == 1  # earlier steps are there
    assert _count(db_url, "SELECT count(*) FROM boundloop_trace WHERE thread_id = 'unsaved' AND node = 'act'") == 0
    assert _count(db_url, "SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'unsaved' AND task_path LIKE '%%act%%'") == 0

    resumed = boundloop("resume", "unsaved", "--json", "--database-url", db_url)
    assert json.loads(resumed.stdout)["status"] == "SUCCESS", resumed.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        events = conn.execute("SELECT kind, node, data ->> 'step', data -> 'call' ->> 'call_id' FROM boundloop_trace"
                              " WHERE thread_id = 'unsaved' AND kind = ANY(%s) ORDER BY id", (list(STEP_EVENTS),)).fetchall()
        acts = conn.execute("SELECT count(DISTINCT checkpoint_id) FROM checkpoint_writes WHERE thread_id = 'unsaved' AND task_path LIKE '%%act%%'").fetchone()[0]
    assert len(events) == len(set(events)), "a step's event was written twice"
    assert sum(1 for _, node, _, _ in events if node == "act") == acts == 4  # the four scripted actor turns, once each
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(UNSAVED_WITH_A_STEP, {"t": "unsaved", "kinds": list(STEP_EVENTS)}).fetchall() == []


async def test_every_step_event_is_in_the_transaction_that_saved_its_step_and_costs_no_round_trip(run_script, runner, monkeypatch):
    standalone: list[str] = []
    for name in ("append_events", "append_trace"):
        original = getattr(store, name)

        async def spy(*args, _original=original, _name=name, **kwargs):
            standalone.append(_name)
            return await _original(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES, READ_NOTES | {"args": {"path": "missing.md"}}]),
                                                                      step("done")], "critic": [CRITIC_PASS]})
    assert waiting.status == "SUCCESS"
    assert standalone == []  # no step's events took a round trip of their own
    async with runner.pool.connection() as conn:
        kinds = [row["kind"] for row in await (await conn.execute("SELECT kind FROM boundloop_trace WHERE thread_id = %s", (waiting.thread_id,))).fetchall()]
        unsaved = await (await conn.execute(UNSAVED_WITH_A_STEP, {"t": waiting.thread_id, "kinds": list(STEP_EVENTS)})).fetchall()
    assert kinds.count("call") == 2 and kinds.count("node") >= 8
    assert unsaved == []


@contextmanager
def _waits() -> Iterator[list[int]]:
    """Counts each wait of an async psycopg connection for the server (as tests/benchmarks/peer.py)."""
    count, original = [0], psycopg.AsyncConnection.wait

    async def counted(self, *args, **kwargs):
        count[0] += 1
        return await original(self, *args, **kwargs)

    psycopg.AsyncConnection.wait = counted
    try:
        yield count
    finally:
        psycopg.AsyncConnection.wait = original


async def test_a_step_save_carries_its_events_in_its_own_batch_not_in_a_round_trip_of_their_own(db_url):
    """Per step: the save's pipelined batch gains one INSERT (one more result to read, sent with the
    rest), where the events written alone took a connection and a round trip of their own."""
    events = [("round-trips", "node", "act", {"step": 3}), ("round-trips", "interrupt", "act", {"step": 3})]
    async with postgres_saver(db_url) as saver:
        costs = {}
        for task_id, held in (("t-plain", []), ("t-traced", events)):
            config = {"configurable": {"thread_id": "round-trips", "checkpoint_ns": "", "checkpoint_id": "1ef0000000000000"}}
            saver.hold_trace(TaskKey.of_task("round-trips", f"act:{task_id}", "1ef0000000000000", task_id), held)
            with _waits() as waits:
                await saver.aput_writes(config, [("messages", ["hello"]), ("branch:to:gate", None)], task_id)
            costs[task_id] = waits[0]
        with _waits() as waits:
            await store.append_events(saver.conn, "round-trips", [event[1:] for event in events])
        costs["alone"] = waits[0]
        assert len(saver.pending_trace) == 0
        async with saver.conn.connection() as conn:
            written = await (await conn.execute("SELECT count(*) AS n FROM boundloop_trace WHERE thread_id = 'round-trips'")).fetchone()
    assert written["n"] == 4
    assert costs["t-traced"] - costs["t-plain"] == 1, costs
    assert costs["alone"] >= 2, costs


async def test_a_threads_events_are_written_in_the_order_its_saves_were_asked_for(db_url):
    """LangGraph does not wait for a task's writes before the next step: a slow save (a large write)
    asked for first still writes its events first."""
    async with postgres_saver(db_url) as saver:
        config = {"configurable": {"thread_id": "ordered", "checkpoint_ns": "", "checkpoint_id": "1ef0000000000003"}}
        for n in range(5):
            saver.hold_trace(TaskKey.of_task("ordered", f"act:t{n}", "1ef0000000000003", f"t{n}"), [("ordered", "node", "act", {"step": n})])
        sizes = [4_000_000, 10, 10, 10, 10]
        await asyncio.gather(*(saver.aput_writes(config, [("messages", ["x" * size])], f"t{n}") for n, size in enumerate(sizes)))
        async with saver.conn.connection() as conn:
            rows = await (await conn.execute("SELECT data ->> 'step' AS step FROM boundloop_trace WHERE thread_id = 'ordered' ORDER BY id")).fetchall()
        assert not saver._trace_order  # nothing left behind per thread
    assert [row["step"] for row in rows] == ["0", "1", "2", "3", "4"]


async def test_a_checkpoint_is_not_saved_before_the_events_of_the_steps_it_settles(db_url):
    """The next checkpoint holds a task's result: it commits only after the task's writes and events
    did, though LangGraph asks for both at once."""
    async with postgres_saver(db_url) as saver:
        config = {"configurable": {"thread_id": "settled", "checkpoint_ns": "", "checkpoint_id": "1ef0000000000004"}}
        saver.hold_trace(TaskKey.of_task("settled", "observe:t1", "1ef0000000000004", "t1"), [("settled", "node", "observe", {"step": 4})])
        writes = asyncio.ensure_future(saver.aput_writes(config, [("messages", ["x" * 4_000_000])], "t1"))
        await asyncio.sleep(0)  # the writes' save has started, as LangGraph's background executor starts it
        checkpoint = {"v": 4, "id": "1ef0000000000005", "ts": "2026-01-01T00:00:00+00:00", "channel_values": {}, "channel_versions": {},
                      "versions_seen": {}, "updated_channels": None}
        await saver.aput(config, checkpoint, {"source": "loop", "step": 5, "parents": {}}, {})
        async with saver.conn.connection() as conn:
            written = await (await conn.execute("SELECT count(*) AS n FROM boundloop_trace WHERE thread_id = 'settled'")).fetchone()
        await writes
    assert written["n"] == 1


@pytest.mark.parametrize("failed", [True, False])
async def test_a_failed_task_drops_its_events_and_a_saved_one_writes_them(db_url, failed):
    async with postgres_saver(db_url) as saver:
        thread = f"failed-{failed}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": "1ef0000000000001"}}
        saver.hold_trace(TaskKey.of_task(thread, "act:t1", "1ef0000000000001", "t1"), [(thread, "node", "act", {"step": 1})])
        writes = [("__error__", ValueError("boom"))] if failed else [("messages", ["hi"])]
        await saver.aput_writes(config, writes, "t1")
        assert len(saver.pending_trace) == 0
        async with saver.conn.connection() as conn:
            written = await (await conn.execute("SELECT count(*) AS n FROM boundloop_trace WHERE thread_id = %s", (thread,))).fetchone()
    assert written["n"] == (0 if failed else 1)


async def test_a_step_whose_events_are_refused_is_not_saved_either(db_url):
    """The events and the step's writes commit together: the trace's trigger refusing the events
    (the run is closed) leaves no write of the step."""
    async with postgres_saver(db_url) as saver:
        pool = saver.conn
        await store.upsert_run(pool, thread_id="closed", goal="g", profile="research", status="SUCCESS", task_hash="h")
        await store.close_run(pool, "closed")
        config = {"configurable": {"thread_id": "closed", "checkpoint_ns": "", "checkpoint_id": "1ef0000000000002"}}
        saver.hold_trace(TaskKey.of_task("closed", "act:t1", "1ef0000000000002", "t1"), [("closed", "node", "act", {"step": 1})])
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="run closed is closed"):
            await saver.aput_writes(config, [("messages", ["hi"]), ("branch:to:gate", None)], "t1")
        async with pool.connection() as conn:
            saved = await (await conn.execute("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = 'closed'")).fetchone()
    assert saved["n"] == 0
