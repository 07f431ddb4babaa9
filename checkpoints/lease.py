"""lease: one executor per run. A session-level advisory lock on the run's thread id, held
while a process drives the run; a second process gets `RunActiveElsewhere` at once.

The lock lives on a connection taken from the pool for the whole drive, so it is released when
the driving process ends for any reason — a crash included (Postgres drops the session).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psycopg_pool import AsyncConnectionPool

from checkpoints.errors import RunActiveElsewhere

TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('boundloop-run:' || %s, 0)) AS locked"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('boundloop-run:' || %s, 0))"


@asynccontextmanager
async def run_lease(pool: AsyncConnectionPool, thread_id: str) -> AsyncIterator[None]:
    async with pool.connection() as conn:
        row = await (await conn.execute(TRY_LOCK, (thread_id,))).fetchone()
        if not row["locked"]:
            raise RunActiveElsewhere(thread_id)
        try:
            yield
        finally:
            await conn.execute(UNLOCK, (thread_id,))
