"""workers: many processes on many machines drive runs from one PostgreSQL, on Procrastinate.

A submitted run is a Procrastinate job carrying the lock `run:<thread id>`, so at most one job
of a run is running anywhere; a human's decision is another job with the same lock, queued
behind it. A worker process drives its jobs with one `Runner`, whose run lease (an advisory
lock) still fences a second driver, e.g. a `boundloop resume` typed by hand or a worker frozen
past the stalled timeout: the job that loses waits and tries again.

A worker that dies (SIGKILL, a lost machine) stops its heartbeat. Every few seconds one worker
runs `recover_stalled` on a slot of its own (the maintenance queue, never shared with runs), which
puts the jobs of workers silent for longer than the stalled timeout back in the queue; another
worker then resumes each run from its last checkpoint, and the ledger makes sure no side effect
happens twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import procrastinate
from langchain_core.runnables import RunnableConfig
from procrastinate.exceptions import AlreadyEnqueued, ConnectorException
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.errors import ApprovalRefused, RunActiveElsewhere
from boundloop.checkpoints.queue import (
    HEARTBEAT_S,
    RUN_LOCK_PREFIX,
    STALLED_AFTER_S,
    migrate_queue,
    record_pickup,
)
from boundloop.graph.core.errors import RunExists
from boundloop.graph.run.runner import Runner
from boundloop.graph.task import RunSettings, Task

RUNS_QUEUE = "runs"
MAINTENANCE_QUEUE = "maintenance"
RECOVERY_CRON = "* * * * * */2"
"""Look for stalled jobs every 2 s (Procrastinate's 6th cron field is seconds). Recovery runs on a
slot of its own in every worker (the maintenance queue), never behind queued runs, so a dead
worker's runs are queued again within STALLED_AFTER_S + 2 s + one poll, and, keeping their place in
line, start on the next free run slot."""
POLL_S = 1.0
"""Nothing notifies a worker when a run's lock is released: a queued continuation starts at the next poll."""
RETRY_WHEN_HELD = procrastinate.RetryStrategy(wait=5, retry_exceptions={RunActiveElsewhere})
"""Another process drives the run (the lease says so): try again every 5 s for as long as it does.
The lease is a session lock, so it ends when that process ends, however it ends."""
QUEUE_POOL_SIZE = 4
START_RUN, CONTINUE_RUN, RECOVER_STALLED = "boundloop.start_run", "boundloop.continue_run", "boundloop.recover_stalled"

logger = logging.getLogger("boundloop.workers")


def queue_app(url: str | None = None) -> procrastinate.App:
    """The queue's app on `url` with its own small pool, or, without a URL, to be opened on a pool
    given to `open_async(pool=...)` (enough to defer jobs; a worker needs its own pool: a pool
    with autocommit in its kwargs breaks the worker's listener)."""
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=QUEUE_POOL_SIZE) if url else procrastinate.PsycopgConnector()
    app = procrastinate.App(connector=connector, worker_defaults={
        "update_heartbeat_interval": HEARTBEAT_S,
        "stalled_worker_timeout": STALLED_AFTER_S,
        "fetch_job_polling_interval": POLL_S,
    })
    app.task(name=START_RUN, queue=RUNS_QUEUE, pass_context=True, retry=RETRY_WHEN_HELD)(start_run)
    app.task(name=CONTINUE_RUN, queue=RUNS_QUEUE, pass_context=True, retry=RETRY_WHEN_HELD)(continue_run)
    recover = app.task(name=RECOVER_STALLED, queue=MAINTENANCE_QUEUE, queueing_lock=RECOVER_STALLED, pass_context=True)(recover_stalled)
    app.periodic(cron=RECOVERY_CRON)(recover)
    return app


def worker_label(name: str | None = None) -> str:
    """`name@host:pid`: procrastinate's worker rows hold only an id, so the label says where it runs."""
    host, pid = socket.gethostname(), os.getpid()
    return f"{name or f'w{pid}'}@{host}:{pid}"


# -- submitting ------------------------------------------------------------------------------


@asynccontextmanager
async def opened_queue(pool: AsyncConnectionPool) -> AsyncIterator[procrastinate.App]:
    """The queue on boundloop's own pool, its tables created if missing: for submitting, not for working."""
    await migrate_queue(pool)
    async with queue_app().open_async(pool=pool) as opened:
        yield opened


async def submit(queue: procrastinate.App, runner: Runner, run_id: str, task: Task, settings: RunSettings) -> int:
    """Queue a new run; return its job id. `RunExists` when the thread already holds a run."""
    existing = await runner.graph.aget_state(_config(run_id))
    if existing.values:
        raise RunExists(run_id, str(existing.values.get("status", {}).get("terminal") or "in progress"))
    deferrer = _deferrer(queue, START_RUN, run_id, queueing_lock=RUN_LOCK_PREFIX + run_id)
    try:
        return await deferrer.defer_async(run_id=run_id, task=task.model_dump(mode="json"), settings=settings.model_dump(mode="json"))
    except AlreadyEnqueued:
        raise RunExists(run_id, "queued") from None


async def enqueue_decision(queue: procrastinate.App, runner: Runner, run_id: str, call_id: str, decision: dict[str, Any]) -> int:
    """Check that `call_id` waits for this decision, then queue the run's continuation; return its job id."""
    snapshot = await runner.graph.aget_state(_config(run_id))
    waiting = {item.value.get("call_id"): item.value for item in snapshot.interrupts if isinstance(item.value, dict)}
    if call_id not in waiting:
        known = sorted(key for key in waiting if key)
        raise ApprovalRefused(run_id, call_id, f"nothing is waiting for it; waiting: {known or 'nothing'}")
    if decision.get("args_hash") not in (None, waiting[call_id].get("args_hash")):
        raise ApprovalRefused(run_id, call_id, "the decision is for other arguments than the ones the request was made for (argument hash mismatch)")
    # No queueing lock: two calls approved one after the other are two continuations, run in turn.
    return await _deferrer(queue, CONTINUE_RUN, run_id).defer_async(run_id=run_id, call_id=call_id, decision=decision)


def _deferrer(queue: procrastinate.App, task_name: str, run_id: str, **options: Any) -> Any:
    return queue.configure_task(task_name, lock=RUN_LOCK_PREFIX + run_id, **options)


# -- working ---------------------------------------------------------------------------------


async def work(url: str, *, concurrency: int, name: str | None = None, stalled_after_s: float = STALLED_AFTER_S,
               install_signal_handlers: bool = True) -> None:
    """Drive queued runs until stopped (SIGINT/SIGTERM: finish the runs in flight, take no more)."""
    label = worker_label(name)
    async with Runner(url) as runner:
        await migrate_queue(runner.pool)
        async with queue_app(url).open_async() as queue:
            logger.info("worker %s: up to %d runs at once (queue %s), recovery on its own slot (queue %s)",
                        label, concurrency, RUNS_QUEUE, MAINTENANCE_QUEUE)
            context = {"runner": runner, "stalled_after_s": stalled_after_s}
            maintenance = asyncio.create_task(queue.run_worker_async(
                queues=[MAINTENANCE_QUEUE], concurrency=1, name=f"{label}:maintenance",
                stalled_worker_timeout=stalled_after_s, install_signal_handlers=False, additional_context=context,
            ))
            try:
                await queue.run_worker_async(
                    queues=[RUNS_QUEUE], concurrency=concurrency, name=label,
                    stalled_worker_timeout=stalled_after_s, install_signal_handlers=install_signal_handlers, additional_context=context,
                )
            finally:
                maintenance.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await maintenance


async def start_run(context: procrastinate.JobContext, run_id: str, task: dict[str, Any], settings: dict[str, Any]) -> str:
    """Start the run, or, when this job is a retry (its worker died), resume it from its checkpoint."""
    runner = await _picked_up(context, run_id)
    if (await runner.graph.aget_state(_config(run_id))).values:
        report = await runner.resume(run_id)
    else:
        report = await runner.start(Task.model_validate(task), RunSettings.model_validate(settings), thread_id=run_id)
    return _done(context, run_id, report.status)


async def continue_run(context: procrastinate.JobContext, run_id: str, call_id: str, decision: dict[str, Any]) -> str:
    """Apply a human's decision and drive the run on. When the decision was applied before this
    job's worker died, the call no longer waits: the run is resumed from its checkpoint instead."""
    runner = await _picked_up(context, run_id)
    snapshot = await runner.graph.aget_state(_config(run_id))
    waiting = {item.value.get("call_id") for item in snapshot.interrupts if isinstance(item.value, dict)}
    on_its_way = not snapshot.interrupts and bool(snapshot.next or snapshot.tasks)
    if call_id in waiting or on_its_way:
        report = await runner.decide(run_id, call_id, decision)
    else:
        report = await runner.resume(run_id)
    return _done(context, run_id, report.status)


async def recover_stalled(context: procrastinate.JobContext, timestamp: int) -> int:
    """Put the jobs of dead workers (no heartbeat for the stalled timeout) back in the queue."""
    manager = context.app.job_manager
    stalled = await manager.get_stalled_jobs(seconds_since_heartbeat=context.additional_context["stalled_after_s"])
    retried = 0
    for job in stalled:
        try:
            await manager.retry_job(job)
        except ConnectorException:  # another worker's recovery retried it first
            continue
        retried += 1
        logger.warning("job %s (%s, lock %s) of a dead worker is queued again", job.id, job.task_name, job.lock)
    return retried


async def _picked_up(context: procrastinate.JobContext, run_id: str) -> Runner:
    runner: Runner = context.additional_context["runner"]
    job = context.job
    attempt = job.attempts + 1  # procrastinate counts the attempts made before this one
    assert job.id is not None, "a job picked up was deferred, so it has its id"
    await record_pickup(runner.pool, run_id, job_id=job.id, attempt=attempt, worker=context.worker_name or "worker")
    logger.info("%s: %s job %s, attempt %s", context.worker_name, run_id, job.id, attempt)
    return runner


def _done(context: procrastinate.JobContext, run_id: str, status: str) -> str:
    logger.info("%s: %s stopped at %s", context.worker_name, run_id, status)
    return status


def _config(run_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": run_id}}
