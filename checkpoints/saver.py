"""saver: LangGraph's AsyncPostgresSaver on our pool, with its database prepared.

Owns the saver's setup (once, serialised across processes), the lock choice below, and
`adelete_for_runs`, which the LangGraph server needs to cancel a run with `rollback` and which
langgraph-checkpoint-postgres 3.2.0 lacks. Never opens a database it was not given
(`pool.database_url` decides which one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from checkpoints.pool import open_pool
from checkpoints.schema import migrate

_SETUP_LOCK = int.from_bytes(b"bl-saver", "big")
_SETUP_POLL_S = 0.05
_DELETE_FOR_RUNS = """
WITH doomed AS (
    DELETE FROM checkpoints WHERE metadata->>'run_id' = ANY(%s)
    RETURNING thread_id, checkpoint_ns, checkpoint_id
)
DELETE FROM checkpoint_writes AS w USING doomed AS d
WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns AND w.checkpoint_id = d.checkpoint_id
"""


class BoundloopSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver that can also forget the checkpoints of given server runs."""

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the runs created (their metadata names the run) and the writes
        made against them; the thread's state goes back to where it was before them.

        Left in place: blobs (content-addressed by version, shared with earlier checkpoints), and
        the writes a resumed run made against the checkpoint it resumed from — LangGraph stores
        no run id on a write (README, "LangGraph server and Studio").
        """
        async with self._cursor() as cur:
            await cur.execute(_DELETE_FOR_RUNS, ([str(run_id) for run_id in run_ids],))


@asynccontextmanager
async def postgres_saver(
    url_or_pool: str | AsyncConnectionPool,
) -> AsyncIterator[BoundloopSaver]:
    """A saver on a database that has LangGraph's checkpoint tables and boundloop's own.

    Given a URL it opens (and finally closes) its own pool; a pool passed in stays open and
    must come from `open_pool` (setup needs autocommit connections).
    """
    if isinstance(url_or_pool, AsyncConnectionPool):
        yield await _prepared_saver(url_or_pool)
        return
    async with await open_pool(url_or_pool) as pool:
        yield await _prepared_saver(pool)


async def _prepared_saver(pool: AsyncConnectionPool) -> BoundloopSaver:
    async with pool.connection() as conn:
        await setup_exclusively(conn, _SETUP_LOCK, AsyncPostgresSaver(conn).setup)
    await migrate(pool)
    saver = BoundloopSaver(pool)
    # langgraph #7259: the saver holds one asyncio.Lock around every query, which serialises
    # concurrent runs even on a pool. The lock only guards a single shared connection; on a
    # pool each query takes its own connection, so we allow half the pool at once and leave the
    # other half to the ledger, trace and payload writes that share it.
    saver.lock = asyncio.Semaphore(max(1, pool.max_size // 2))  # type: ignore[assignment]
    return saver


async def setup_exclusively(conn: AsyncConnection, lock: int, setup: Callable[[], Awaitable[None]]) -> None:
    """Run a LangGraph `setup()` (the saver's, the store's) on `conn` while no other process
    holding advisory lock `lock` runs it.

    setup() is not safe for two first-time callers at once (both create the same tables).
    It runs CREATE INDEX CONCURRENTLY, which waits for every open transaction, so a caller
    blocked in pg_advisory_lock() would deadlock with it: waiters poll pg_try_advisory_lock
    in short transactions instead.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        while True:
            await cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (lock,))
            row = await cur.fetchone()
            if row is not None and row["locked"]:
                break
            await asyncio.sleep(_SETUP_POLL_S)
        try:
            await setup()
        finally:
            await cur.execute("SELECT pg_advisory_unlock(%s)", (lock,))
