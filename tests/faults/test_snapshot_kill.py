"""SIGKILL a real run after its growing channels (messages, observations, usage, breakers) were
snapshotted, resume it in this process, and find the state whole: each tool call paired with exactly
one result, one observation per call, the usage of every call, and one COMPLETE ledger entry (one
effect) per side-effecting call.

The product snapshots every SNAPSHOT_EVERY = 4,000 updates (graph/state.py), which a run reaches
only after minutes. The killed process runs the real graph on real Postgres with real MCP servers,
but with its channels' snapshot cadence set to SMALL_CADENCE, so a snapshot is written within a few
steps; the resume runs the product's graph (its own cadence) from that checkpoint: it rebuilds each
channel from the snapshot plus the deltas after it, the same reading code as at any cadence.

BOUNDLOOP_LONG_SNAPSHOT_KILL=1 runs the same test at the product's own cadence instead: the killed
process is left untouched and the run is long enough (TURNS) to pass SNAPSHOT_EVERY message updates
first (minutes; tests/README.md, Long soak and stress runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage

from boundloop.checkpoints import store
from boundloop.graph.state import SNAPSHOT_EVERY
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step

REPO = Path(__file__).resolve().parents[2]
LONG = os.environ.get("BOUNDLOOP_LONG_SNAPSHOT_KILL") == "1"
SMALL_CADENCE = 6
GROWING = ("messages", "observations", "usage", "breakers")
TURNS = SNAPSHOT_EVERY // 2 + 20 if LONG else 15
"""Tool calls in the run: each adds two message updates (the call, its result)."""
ALLOW_WRITES = {"rules": [{"id": "writes", "action": "allow", "server": "workspace", "tool": "write_file"}]}
CHILD = """
import asyncio, json, sys
from boundloop.graph.run.runner import Runner
from boundloop.graph.task import RunSettings, Task

async def main(db_url, thread_id, task, settings, cadence, growing):
    async with Runner(db_url) as runner:
        for name in growing if cadence else ():  # the killed process snapshots often; the product's cadence is untouched elsewhere
            runner.graph.channels[name].snapshot_frequency = cadence
        await runner.start(Task.model_validate(task), RunSettings(**settings), thread_id=thread_id)

asyncio.run(main(*json.loads(sys.argv[1])))
"""


def _call(turn: int) -> dict:
    if turn % 3 == 2:
        return {"name": "workspace__write_file", "args": {"path": f"out/{turn}.txt", "content": f"turn {turn}\n"}}
    return {"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 100 + turn}}


def _snapshots(db_url: str, thread_id: str) -> set[str]:
    import psycopg

    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT DISTINCT channel FROM checkpoint_blobs WHERE thread_id = %s AND channel = ANY(%s)",
                            (thread_id, list(GROWING))).fetchall()
    return {row[0] for row in rows}


async def test_a_run_killed_past_a_channel_snapshot_resumes_whole(db_url, runner, workspace, tmp_path):
    assert runner.graph.channels["messages"].snapshot_frequency == SNAPSHOT_EVERY  # only the killed process uses SMALL_CADENCE
    script = tmp_path / "script.json"
    roles = {"planner": [PLAN_ONE_STEP], "actor": [*(step(calls=[_call(turn)]) for turn in range(TURNS)), step("done")],
             "critic": [CRITIC_PASS]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    thread_id = "snapshot-kill"
    task = {"goal": "Read the notes and write the outputs", "targets": ["out/"], "budget": {"tool_calls": 2 * TURNS, "tool_calls_per_tool": 2 * TURNS, "model_turns": 2 * TURNS, "side_effects": TURNS, "wall_clock_s": None}}
    settings = {"model": "scripted", "script": str(script), "workspace_root": str(workspace), "policy": ALLOW_WRITES}
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps([db_url, thread_id, task, settings, None if LONG else SMALL_CADENCE, GROWING])],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + (3600 if LONG else 90)
        needed = {"messages"} if LONG else {"messages", "observations", "usage"}  # a call adds one observation, two messages
        while not needed <= _snapshots(db_url, thread_id):
            assert child.poll() is None, f"the run ended before its channels were snapshotted: {child.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no snapshot in time"
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)  # the run and its MCP servers, mid-run
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL
    killed_at = await runner.report(thread_id)
    assert killed_at.values["status"].get("terminal") is None, "killed after the run ended: nothing to resume"
    done_before = len(killed_at.values.get("observations") or [])

    report = await runner.resume(thread_id)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    messages = report.values["messages"]
    calls = [call["id"] for message in messages if isinstance(message, AIMessage) for call in message.tool_calls]
    results = Counter(message.tool_call_id for message in messages if isinstance(message, ToolMessage))
    assert len(calls) == TURNS and len(set(calls)) == TURNS
    assert results == Counter(calls), "each tool call has exactly one result"
    observations = report.values["observations"]
    assert len(observations) == TURNS and len({obs["call_id"] for obs in observations}) == TURNS
    assert {obs["tool_call_id"] for obs in observations} == set(calls)
    assert all(obs["status"] == "ok" for obs in observations), [obs["status"] for obs in observations]
    assert done_before < TURNS  # the kill cut the run short; the resume did the rest
    ledger = await store.run_ledger(runner.pool, thread_id)
    writes = [turn for turn in range(TURNS) if turn % 3 == 2]
    assert sorted(entry.status for entry in ledger) == ["COMPLETE"] * len(writes)
    assert len({entry.idempotency_key for entry in ledger}) == len(writes), "one ledger entry per side-effecting call"
    for turn in writes:
        assert (workspace / "out" / f"{turn}.txt").read_text() == f"turn {turn}\n"
    assert report.values["breakers"]["calls"] and len(report.values["breakers"]["calls"]) == TURNS
    assert report.values["usage"]["tool_calls"] == TURNS and report.values["usage"]["side_effects"] == len(writes)
