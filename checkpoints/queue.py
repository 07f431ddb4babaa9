"""queue: Procrastinate's tables next to ours, and the log of which worker picked up which run.

Owns applying Procrastinate's schema (once: its SQL is not idempotent), the pickup log table and
the queries `boundloop runs` and `boundloop approve` ask of the queue. Never defers or runs jobs
(`boundloop.graph.run.workers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

HEARTBEAT_S = 2.0
STALLED_AFTER_S = 10.0
"""A worker silent for longer is dead: its jobs go back to the queue. At least 3 heartbeats, so a
busy worker is not taken for dead (it would only lose its runs to the lease, not duplicate them)."""
"""How often a worker says it is alive; one silent for three heartbeats is shown as such."""
RUN_LOCK_PREFIX = "run:"
"""Every job that drives a run carries the Procrastinate lock `run:<thread id>`: one driver at a time."""

PICKUPS = (
    "CREATE TABLE IF NOT EXISTS boundloop_run_pickups ("
    " id BIGSERIAL PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " job_id BIGINT NOT NULL,"
    " attempt INTEGER NOT NULL,"
    " worker TEXT NOT NULL,"
    " at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());"
    "CREATE INDEX IF NOT EXISTS boundloop_run_pickups_thread_idx ON boundloop_run_pickups (thread_id, id)"
)
"""Append-only: one row each time a worker starts a job of a run (a retried job adds a row)."""

# Not the constant boundloop.checkpoints.schema uses: b"blqueue1" as an int8.
_SCHEMA_LOCK = int.from_bytes(b"blqueue1", "big")

RECORD_PICKUP = "INSERT INTO boundloop_run_pickups (thread_id, job_id, attempt, worker) VALUES (%s, %s, %s, %s)"
READ_PICKUPS = "SELECT * FROM boundloop_run_pickups WHERE thread_id = %s ORDER BY id"
# The latest pickup of each run, with the state of the run's newest job and its worker's heartbeat.
HOLDERS = """
SELECT runs.thread_id, pickup.worker, job.status, job.attempts,
       extract(epoch FROM now() - heartbeat.last_heartbeat) AS silent_s,
       EXISTS (SELECT 1 FROM procrastinate_jobs waiting
               WHERE waiting.lock = %(prefix)s || runs.thread_id AND waiting.status = 'todo') AS queued
FROM unnest(%(threads)s::text[]) AS runs(thread_id)
LEFT JOIN LATERAL (SELECT * FROM boundloop_run_pickups p WHERE p.thread_id = runs.thread_id ORDER BY p.id DESC LIMIT 1) pickup ON true
LEFT JOIN procrastinate_jobs job ON job.id = pickup.job_id
LEFT JOIN procrastinate_workers heartbeat ON heartbeat.id = job.worker_id"""
DRIVEN_BY_WORKERS = "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE lock = %s) AS driven"


@dataclass(frozen=True)
class Pickup:
    id: int
    thread_id: str
    job_id: int
    attempt: int
    """Procrastinate's attempt counter for the job (a stalled job retried counts one more)."""
    worker: str
    """The worker's name, host and pid, e.g. `w1@db-2:4711`."""
    at: datetime


async def migrate_queue(pool: AsyncConnectionPool) -> None:
    """Create Procrastinate's schema when its tables are missing, and the pickup log.

    Safe under concurrent callers in any number of processes: one transaction under an advisory
    lock, so a second caller waits and then finds the tables. For an upgrade of Procrastinate,
    apply the SQL files of `procrastinate schema --migrations-path` instead.
    """
    async with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        await cur.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present")
        if not (await cur.fetchone())["present"]:
            from procrastinate.schema import SchemaManager  # the worker pool's engine: imported only by what uses the queue

            await cur.execute(SchemaManager.get_schema(), prepare=False)  # several statements: no parameters, not prepared
        await cur.execute(PICKUPS, prepare=False)


async def record_pickup(pool: AsyncConnectionPool, thread_id: str, *, job_id: int, attempt: int, worker: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(RECORD_PICKUP, (thread_id, job_id, attempt, worker))


async def pickups(pool: AsyncConnectionPool, thread_id: str) -> list[Pickup]:
    """Every worker that started the run, in order."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(READ_PICKUPS, (thread_id,))
        return [Pickup(**row) for row in await cur.fetchall()]


async def holders(pool: AsyncConnectionPool, thread_ids: list[str]) -> dict[str, str]:
    """What each run's worker column says: the worker driving it now (marked when it missed three
    heartbeats: it may be dead), `queued` while a job waits for a worker, or nothing.
    Empty when no worker ever ran against this database."""
    if not thread_ids or not await _queue_exists(pool):
        return {}
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(HOLDERS, {"threads": thread_ids, "prefix": RUN_LOCK_PREFIX})
        rows = await cur.fetchall()
    said = {}
    for row in rows:
        if row["status"] == "doing":
            silent = row["silent_s"]
            stalled = silent is None or silent > 3 * HEARTBEAT_S
            said[row["thread_id"]] = f"{row['worker']} (no heartbeat for {silent or 0:.0f}s)" if stalled else row["worker"]
        elif row["queued"]:
            said[row["thread_id"]] = "queued"
    return said


async def driven_by_workers(pool: AsyncConnectionPool, thread_id: str) -> bool:
    """True when the run was submitted to the worker pool (a job of it exists, in any state)."""
    if not await _queue_exists(pool):
        return False
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(DRIVEN_BY_WORKERS, (RUN_LOCK_PREFIX + thread_id,))
        return (await cur.fetchone())["driven"]


async def _queue_exists(pool: AsyncConnectionPool) -> bool:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT to_regclass('boundloop_run_pickups') IS NOT NULL AS present")
        return (await cur.fetchone())["present"]
