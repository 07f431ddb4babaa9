"""Three `boundloop worker` processes share one PostgreSQL; one is SIGKILLed while it drives runs
with side effects. Every run still ends, and each side effect happened exactly once.

Everything is real: the worker processes (Procrastinate), the graph, the ledger, one workspace MCP
server over HTTP shared by all runs (so killing a worker leaves the server up, as in production),
Postgres. The runs are submitted in-process through `boundloop.graph.run.workers.submit`, each with its own
script, because each run writes files of its own (`boundloop submit` is tested in test_submit.py).

    BOUNDLOOP_WORKERS_RUNS=200 .venv/bin/python -m pytest -q tests/workers/test_kill_worker.py   # a longer soak
"""

from __future__ import annotations

import json
import os
import signal

from boundloop.checkpoints.queue import pickups
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from tests.workers.conftest import MID_RUN, wait_until, writes

RUNS = int(os.environ.get("BOUNDLOOP_WORKERS_RUNS", "60"))
WORKERS = 3
DONE = "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'boundloop.start_run' AND status IN ('succeeded', 'failed')"


async def test_a_worker_killed_mid_run_loses_no_run_and_repeats_no_side_effect(worker_pool, start_worker):
    names = [f"r{index:03d}" for index in range(RUNS)]
    async with Runner(worker_pool.db_url) as runner:
        await worker_pool.queue(runner, names)

        victim, *others = [start_worker(f"w{index}") for index in range(WORKERS)]
        cut = wait_until("w0 driving a run between two of its writes", lambda: worker_pool.query(MID_RUN, "w0@%"), within_s=120, every_s=0.02)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        cut_runs = sorted({thread for (thread,) in cut})

        wait_until(f"all {RUNS} runs ended", lambda: worker_pool.query(DONE)[0][0] == RUNS, within_s=60 + RUNS * 2, every_s=0.5)
        assert all(process.poll() is None for process in others), "a surviving worker exited"

        statuses = dict(worker_pool.query("SELECT thread_id, status FROM boundloop_runs"))
        assert statuses == {name: Terminal.SUCCESS for name in names}
        for name in names:
            assert worker_pool.files(name) == {"done.md": f"done {name}\n", "report.md": f"final {name}\n"}, name
            assert [status for _, status in worker_pool.ledger(name)] == ["COMPLETE"] * len(writes(name)), name
        # The workspace server journals each keyed write once: a write sent again with its key is answered, not redone.
        journaled = [json.loads(path.read_text()) for path in worker_pool.journal.rglob("*.json")]
        assert len(journaled) == RUNS * len(writes("x")) and all(entry.get("done") for entry in journaled)

        for thread in cut_runs:  # the killed worker's runs went on elsewhere, from where they were cut
            taken = [pickup.worker.split("@")[0] for pickup in await pickups(runner.pool, thread)]
            assert taken[0] == "w0" and len(taken) == 2 and taken[1] != "w0", (thread, taken)
        jobs = worker_pool.query("SELECT status, count(*) FROM procrastinate_jobs WHERE task_name = 'boundloop.start_run' GROUP BY status")
        assert dict(jobs) == {"succeeded": RUNS}
