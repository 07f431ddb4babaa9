"""What each step of the tool loop writes to the checkpoint tables: only the channels it changed,
and of the breakers only the entries it changed (so a long run's steps stay the same size)."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row

from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from tests.graph.conftest import CRITIC_PASS, PLAN_READ_NOTES, step

READS = [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 100 + n}} for n in range(4)]
"""Four reads that differ (the repeated-call breaker would refuse the third identical one)."""


async def _writes(runner: Runner, thread_id: str) -> list[tuple[str, str, Any]]:
    """(node, channel, value) of every write of the run's main graph, in order."""
    async with runner.pool.connection() as conn:
        rows = await (await conn.cursor(row_factory=dict_row).execute(
            "SELECT task_path, channel, type, blob FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id, task_id, idx", (thread_id,))).fetchall()
    serde = JsonPlusSerializer()
    return [(row["task_path"].rsplit(", ", 1)[-1], row["channel"], serde.loads_typed((row["type"], row["blob"]))) for row in rows]


async def test_each_grounding_writes_only_the_breaker_entries_of_its_own_call(run_script, runner):
    """Four different reads: every breakers write names one call; the state still counts all four."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS), step("done")],
                               "critic": [CRITIC_PASS]})
    assert report.status == Terminal.SUCCESS
    written = [value for _, channel, value in await _writes(runner, report.thread_id) if channel == "breakers"]
    assert [len(value["calls"]) for value in written] == [1, 1, 1, 1]
    assert set(written[0]["circuits"]) == {"tool:workspace__read_file", "server:workspace"}
    assert all("circuits" not in value for value in written[1:])  # the circuits stayed closed: nothing to write
    assert sorted(report.values["breakers"]["calls"].values()) == [1, 1, 1, 1]


async def test_the_tool_loop_writes_no_channel_it_left_unchanged(run_script, runner):
    """No empty approvals or refusal messages from act's gate when it admitted everything (act writes
    its reply alone); no status while it stays the same; no plan from act's grounding once the step is done and later reads change nothing in
    it; usage deltas without their zeros."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS[:3]), step("done")],
                               "critic": [CRITIC_PASS]}, planning="always")
    assert report.status == Terminal.SUCCESS
    writes = await _writes(runner, report.thread_id)
    act = {channel for node, channel, _ in writes if node == "act"}
    assert "approvals" not in act and "dispatch" in act
    assert [len(value) for node, channel, value in writes if node == "act" and channel == "messages"] == [1, 1, 1, 1]
    plans = [value for node, channel, value in writes if node == "act" and channel == "plan"]
    assert len(plans) == 1 and plans[0]["steps"][0]["status"] == "done"  # the first read did the step; the next two changed nothing
    statuses = [value for node, channel, value in writes if node == "act" and channel == "status"]
    assert statuses == [{"phase": "act", "gated": True}, {"phase": "act"}]  # gated turn after turn is written once
    usage = [value for node, channel, value in writes if channel == "usage" and node == "act"]
    assert len(usage) == 4 and all(value["wall_clock_s"] > 0 and all(value.values()) for value in usage)  # no zero counters, no empty maps


async def test_a_long_run_stores_its_history_as_deltas_not_as_repeated_snapshots(run_script, runner):
    """Past LangGraph's default snapshot cadence (100 updates) the messages and observations are still
    stored as each step's delta: a full copy of the history every 100 updates would make storage grow
    with the square of the run's length (tests/benchmarks/peer.py storage shows it at 1,000 turns).
    The usage is stored as deltas too (one total per step was a third of a step's blobs), with a
    snapshot of its small total every USAGE_SNAPSHOT_EVERY updates, so a read replays few of them;
    read back from the database, it is the total the run itself summed."""
    reads = [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 100 + n}} for n in range(60)]
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in reads), step("done")],
                               "critic": [CRITIC_PASS]}, task={"budget": {"tool_calls": 100, "tool_calls_per_tool": 100, "model_turns": 100}})
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert len(report.values["messages"]) > 100 and len(report.values["observations"]) == 60
    assert report.values["usage"]["tool_calls"] == 60 and report.values["usage"]["per_tool"] == {"workspace__read_file": 60}
    async with runner.pool.connection() as conn:
        snapshots = await (await conn.cursor(row_factory=dict_row).execute(
            "SELECT channel, octet_length(blob) AS size FROM checkpoint_blobs WHERE thread_id = %s AND channel IN ('messages', 'observations', 'usage')",
            (report.thread_id,))).fetchall()
    assert [row["channel"] for row in snapshots if row["channel"] != "usage"] == []  # a full copy of a history would be a blob row here
    usage_snapshots = [row["size"] for row in snapshots if row["channel"] == "usage"]
    assert len(usage_snapshots) == 1 and usage_snapshots[0] < 1_000  # ~130 usage updates: one snapshot, of the total alone
    assert (await runner.report(report.thread_id)).values["usage"] == report.values["usage"]  # snapshot + deltas after it = the run's own sum


async def test_a_committed_result_is_written_once(run_script, runner):
    """Commit writes the result finalize keeps: its provenance grows with every call, so a second
    copy at finalize would add a row the size of the run's whole call list."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS[:2]), step("done")],
                               "critic": [CRITIC_PASS]})
    assert report.status == Terminal.SUCCESS
    results = [(node, value) for node, channel, value in await _writes(runner, report.thread_id) if channel == "result"]
    assert results == [("commit", report.values["result"])]
    assert report.values["result"]["kind"] == "result" and len(report.values["result"]["provenance"]["tool_calls"]) == 2
