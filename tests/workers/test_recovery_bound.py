"""A dead worker's runs start again within a bound, however many runs are queued behind them.

Two `boundloop worker` processes, 200 runs queued; one worker is SIGKILLed while it drives a run.
Recovery runs on a slot of its own in every worker, so it never waits for the backlog to start; the
run it puts back keeps its place in line and starts on the next free run slot.
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone

from boundloop.checkpoints.queue import HEARTBEAT_S, STALLED_AFTER_S, pickups
from boundloop.graph.run.runner import Runner
from tests.workers.conftest import MID_RUN, eventually, wait_until

QUEUED = 200
BOUND_S = 15.0
"""From the kill to the cut run's next pickup: the stalled timeout, a recovery tick, a poll, a free slot."""


async def test_a_dead_workers_run_is_picked_up_within_the_bound_with_200_runs_queued(worker_pool, start_worker):
    names = [f"q{index:03d}" for index in range(QUEUED)]
    async with Runner(worker_pool.db_url) as runner:
        await worker_pool.queue(runner, names)

        victim = start_worker("w0", concurrency=2)
        start_worker("w1", concurrency=2)
        cut = wait_until("w0 driving a run between two of its writes", lambda: worker_pool.query(MID_RUN, "w0@%"), within_s=120, every_s=0.02)
        victim.send_signal(signal.SIGKILL)
        killed_at = datetime.now(timezone.utc)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        thread = cut[0][0]
        queued_behind = worker_pool.query("SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'")[0][0]

        async def picked_again() -> list:
            return (await pickups(runner.pool, thread))[1:]

        again = await eventually(f"{thread} picked up again after its worker died", picked_again, within_s=BOUND_S + 30, every_s=0.2)
        waited_s = (again[0].at - killed_at).total_seconds()
        assert again[0].worker.startswith("w1@")
        assert queued_behind > 100, f"only {queued_behind} runs were queued when the worker died: the backlog is not what this tests"
        # no sooner than the stalled timeout allows (counted from the last heartbeat, up to one beat before the kill)
        assert STALLED_AFTER_S - HEARTBEAT_S < waited_s <= BOUND_S, f"picked up {waited_s:.1f}s after the kill; bound {BOUND_S}s"
