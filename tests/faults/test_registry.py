"""The run registry never lies: `running` only while a process holds the run's lease, otherwise
`waiting` with what for, `stopped` with the error kept, or the terminal code.

In-process runs against real Postgres, plus a real `boundloop` process killed mid-run.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess

import psycopg
import pytest

from boundloop.checkpoints import store
from boundloop.graph.core.errors import RunStopped
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, boundloop

DELETE = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}
LEASE = "SELECT pg_advisory_lock(hashtextextended('boundloop-run:' || %s, 0))"


async def test_a_run_waiting_for_an_approval_reads_waiting_with_what_for(run_script, runner):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]})
    assert report.status == Terminal.CONFIRM_REQUIRED
    row = await store.get_run(runner.pool, report.thread_id)
    assert row.status == "waiting"
    assert row.detail == "CONFIRM_REQUIRED: tool_approval a0.0 workspace__delete_file"
    done = await runner.resume(report.thread_id, decisions={report.interrupts[0]["id"]: {"decision": "reject", "message": "keep it"}})
    assert (await store.get_run(runner.pool, report.thread_id)).status == done.status == Terminal.SUCCESS


async def test_a_run_stopped_by_a_model_error_reads_stopped_with_the_error_kept(run_script, runner):
    with pytest.raises(RunStopped) as stopped:
        await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES])], "critic": [CRITIC_PASS]})
    row = (await store.list_runs(runner.pool))[0]
    assert row.thread_id == stopped.value.run_id
    assert row.status == "stopped"
    assert row.error.startswith("ScriptExhausted: ") and "actor" in row.error


async def test_running_is_shown_only_while_a_process_holds_the_runs_lease(run_script, runner, db_url):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE])], "critic": [CRITIC_PASS]})
    await store.set_run_status(runner.pool, report.thread_id, store.RUNNING)  # as a driver records it
    with psycopg.connect(db_url, autocommit=True) as driver:
        driver.execute(LEASE, (report.thread_id,))
        assert (await store.get_run(runner.pool, report.thread_id)).status == "running"
    # The driver's session ended without a word; its backend lets go of the lock a moment later.
    for _ in range(100):
        row = await store.get_run(runner.pool, report.thread_id)
        if row.status != "running":
            break
        await asyncio.sleep(0.05)
    assert row.status == "stopped" and row.error == store.DIED_SILENTLY


def test_a_killed_run_reads_stopped_and_resumes(db_url, tmp_path):
    _, servers, script = _crash_task(tmp_path, "killed", slow_s=0.1)
    crashed = subprocess.run([BOUNDLOOP, *_run_args(servers, script, "killed", db_url)], env=_env(BOUNDLOOP_CRASH_AT="enter:act#2"),
                             capture_output=True, text=True, timeout=180)
    assert crashed.returncode == -signal.SIGKILL
    listed = {row["thread_id"]: row for row in json.loads(boundloop("runs", "--json", "--database-url", db_url).stdout)}
    assert listed["killed"]["status"] == "stopped"
    assert "killed, crashed or cut off from the database" in listed["killed"]["error"]
    resumed = boundloop("resume", "killed", "--json", "--database-url", db_url)
    assert json.loads(resumed.stdout)["status"] == Terminal.SUCCESS
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status, error FROM boundloop_runs WHERE thread_id = 'killed'").fetchone() == (Terminal.SUCCESS, None)
