"""`boundloop runs` shows which worker holds a run, and that worker going silent. A worker frozen
past the stalled timeout (SIGSTOP) loses its job to another worker, which must still not drive the
run while the frozen one holds its lease; once the frozen one dies, the other finishes the run."""

from __future__ import annotations

import json
import signal

from boundloop.checkpoints.queue import pickups
from boundloop.graph.run import workers
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.workers.conftest import ENDED, MID_RUN, boundloop, eventually, wait_until, writes


def _worker(rows: list[dict], run: str) -> str:
    return next(row["worker"] for row in rows if row["thread_id"] == run) or ""


async def _said(runner: Runner, run: str, text: str) -> str | None:
    said = _worker(await runner.runs(), run)
    return said if text in said else None


async def _cleared(runner: Runner, run: str) -> bool:
    return _worker(await runner.runs(), run) == ""


async def _taken_by(runner: Runner, run: str, prefix: str) -> bool:
    return any(pickup.worker.startswith(prefix) for pickup in await pickups(runner.pool, run))


async def test_runs_shows_the_holder_and_a_frozen_worker_is_fenced_until_it_dies(worker_pool, start_worker):
    run = "held"
    async with Runner(worker_pool.db_url) as runner:
        async with workers.opened_queue(runner.pool) as queue:
            settings = RunSettings(model="scripted", script=str(worker_pool.script(run)), servers=json.loads(worker_pool.servers.read_text()))
            await workers.submit(queue, runner, run, Task(goal="Write the held report in held/", budget={"side_effects": 10}), settings)
        frozen = start_worker("w1")
        wait_until("w1 between two writes of the run", lambda: worker_pool.query(MID_RUN, "w1@%"), within_s=90, every_s=0.02)
        frozen.send_signal(signal.SIGSTOP)
        try:
            listed = boundloop("runs", "--json", "--database-url", worker_pool.db_url)
            assert listed.returncode == 0, listed.stderr
            assert _worker(json.loads(listed.stdout), run).startswith("w1@"), listed.stdout
            silent = await eventually("the column says w1 is silent", lambda: _said(runner, run, "no heartbeat"), within_s=30)
            assert silent.startswith("w1@")
            # Read only now: a write w1's MCP server (its own process, not stopped) had already been
            # sent may land just after the SIGSTOP; by the time w1 is silent it has landed.
            files_when_frozen = worker_pool.files(run)

            start_worker("w2")
            await eventually("w2 takes the stalled job", lambda: _taken_by(runner, run, "w2@"), within_s=60)
            # w1 still holds the run's lease: w2 must not drive it, and nothing more happens.
            waiting = "SELECT 1 FROM procrastinate_jobs WHERE lock = %s AND status = 'todo'"
            wait_until("w2 gives the job back", lambda: worker_pool.query(waiting, f"run:{run}"), within_s=30)
            assert worker_pool.files(run) == files_when_frozen
            assert worker_pool.query("SELECT status FROM boundloop_runs WHERE thread_id = %s", run) == [("running",)]
        finally:
            frozen.send_signal(signal.SIGKILL)
            frozen.wait(timeout=10)

        ended = wait_until("w2 finishes the run", lambda: worker_pool.query(ENDED, run), within_s=60)
        assert ended == [(Terminal.SUCCESS,)]
        assert worker_pool.files(run) == {"done.md": f"done {run}\n", "report.md": f"final {run}\n"}
        assert [status for _, status in worker_pool.ledger(run)] == ["COMPLETE"] * len(writes(run))
        assert [p.worker.split("@")[0] for p in await pickups(runner.pool, run)][-1] == "w2"
        # Ended: once the job is closed nobody holds it (the registry says SUCCESS a moment before).
        await eventually("the column clears", lambda: _cleared(runner, run), within_s=10)
