"""`boundloop submit`, `boundloop worker` and `boundloop approve` on a run the worker pool drives:
the decision is queued as the run's continuation and a worker carries it out."""

from __future__ import annotations

import asyncio
import json

import psycopg

from boundloop.checkpoints import open_pool
from boundloop.checkpoints.queue import migrate_queue
from boundloop.graph.run import workers
from boundloop.graph.run.runner import Runner
from boundloop.graph.task import RunSettings, Task
from tests.workers.conftest import ENDED, boundloop, wait_until, writes

PAUSED = "SELECT 1 FROM procrastinate_jobs WHERE lock = %s AND status = 'succeeded'"
"""The run's first job is done: the run waits at its interrupt."""


def test_a_decision_on_a_queued_run_is_carried_out_by_a_worker(worker_pool, start_worker):
    """The run pauses at a delete (coding_assistant asks); `approve` queues the continuation and
    returns at once; the worker deletes the file and the run commits."""
    delete = {"name": "workspace__delete_file", "args": {"path": "r1/done.md"}}
    run = worker_pool.submit("r1", extra=[delete])
    start_worker("w1")

    wait_until("the run waits for approval", lambda: worker_pool.query(PAUSED, f"run:{run}"), within_s=90)
    [(call_id, tool)] = worker_pool.query("SELECT call_id, tool FROM boundloop_approvals WHERE thread_id = %s", run)
    assert tool == "workspace__delete_file"

    refused = boundloop("approve", run, "a9.9", "--database-url", worker_pool.db_url)
    assert refused.returncode == 2, refused.stdout
    assert f"decision for call a9.9 of run {run} refused: nothing is waiting for it; waiting: ['{call_id}']" in refused.stderr
    assert "Traceback" not in refused.stderr

    approved = boundloop("approve", run, call_id, "--json", "--database-url", worker_pool.db_url)
    assert approved.returncode == 0, approved.stderr
    queued = json.loads(approved.stdout)
    assert queued["status"] == "QUEUED" and queued["run_id"] == run

    ended = wait_until("the run ends", lambda: worker_pool.query(ENDED, run), within_s=60)
    assert ended == [("SUCCESS",)]
    assert worker_pool.files("r1") == {"report.md": "final r1\n"}  # done.md was deleted, once approved
    assert [status for _, status in worker_pool.ledger(run)] == ["COMPLETE"] * (len(writes("r1")) + 1)
    jobs = worker_pool.query("SELECT task_name, status FROM procrastinate_jobs WHERE lock = %s ORDER BY id", f"run:{run}")
    assert jobs == [("boundloop.start_run", "succeeded"), ("boundloop.continue_run", "succeeded")]
    assert queued["job_id"] == worker_pool.query("SELECT id FROM procrastinate_jobs WHERE task_name = 'boundloop.continue_run'")[0][0]


async def test_submitting_a_run_id_twice_is_refused_and_queues_nothing(worker_pool):
    async with Runner(worker_pool.db_url) as runner, workers.opened_queue(runner.pool) as queue:
        await workers.submit(queue, runner, "twice", Task(goal="once"), RunSettings(script=str(worker_pool.script("twice"))))
    again = boundloop("submit", "--goal", "again", "--model", "scripted", "--script", str(worker_pool.script("twice")),
                      "--servers", str(worker_pool.servers), "--thread", "twice", "--database-url", worker_pool.db_url)
    assert again.returncode == 2
    assert "run twice already exists with status queued" in again.stderr and "Traceback" not in again.stderr
    assert worker_pool.query("SELECT count(*) FROM procrastinate_jobs") == [(1,)]


def test_submit_without_tasks_or_with_a_missing_script_says_what_to_do(worker_pool, tmp_path):
    empty = boundloop("submit", "--database-url", worker_pool.db_url)
    assert empty.returncode == 2 and "nothing to submit: name task files" in empty.stderr
    missing = boundloop("submit", "--goal", "x", "--model", "scripted", "--script", str(tmp_path / "nope.json"), "--database-url", worker_pool.db_url)
    assert missing.returncode == 2 and "nope.json" in missing.stderr and "Traceback" not in missing.stderr
    assert worker_pool.query("SELECT count(*) FROM procrastinate_jobs") == []  # nothing was even set up


async def test_the_queue_schema_is_applied_once_however_many_processes_start_together(db_url):
    """Procrastinate's schema SQL fails when run twice; concurrent first starts must not run it twice."""
    pools = [await open_pool(db_url, max_size=1) for _ in range(4)]
    try:
        await asyncio.gather(*(migrate_queue(pool) for pool in pools))
        await migrate_queue(pools[0])
    finally:
        for pool in pools:
            await pool.close()
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'procrastinate%%' OR tablename = 'boundloop_run_pickups'")}
    assert {"procrastinate_jobs", "procrastinate_workers", "boundloop_run_pickups"} <= tables
