"""lease: one executor per run. A session-level advisory lock on the run's thread id, held
while a process drives the run; a second driver gets `RunActiveElsewhere` at once.

All the leases of a process live on one dedicated connection (`LeaseHolder`), never on a pooled
one: a thousand runs cost one connection, and the pool stays free for checkpoint, ledger and
trace writes. The lock is released when the drive ends, and by Postgres when the driving process
dies or its connection drops (the session ends). The lock key is
hashtextextended('boundloop-run:' || thread_id, 0); the run registry reads it from pg_locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg.rows import dict_row

from boundloop.checkpoints.errors import RunActiveElsewhere

TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('boundloop-run:' || %s, 0)) AS locked"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('boundloop-run:' || %s, 0))"
CONNECT_TIMEOUT_S = 10

log = logging.getLogger(__name__)


class LeaseHolder:
    """The leases of one process, on one connection of its own to `url`."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.AsyncConnection | None = None
        self._held: set[str] = set()
        self._lock = asyncio.Lock()  # one statement at a time on the shared session

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[None]:
        """Hold the run's lease for the block; `RunActiveElsewhere` if any driver holds it,
        this process included (a session may take its own advisory lock twice)."""
        await self._acquire(thread_id)
        try:
            yield
        finally:
            await asyncio.shield(self._release(thread_id))  # a cancelled drive still unlocks

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def aclose(self) -> None:
        async with self._lock:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def _acquire(self, thread_id: str) -> None:
        async with self._lock:
            if thread_id in self._held:
                raise RunActiveElsewhere(thread_id)
            try:
                locked = await self._try_lock(await self._connection(), thread_id)
            except psycopg.OperationalError:
                # The session died since its last use (and took its locks with it): reconnect once.
                locked = await self._try_lock(await self._reconnect(), thread_id)
            if not locked:
                raise RunActiveElsewhere(thread_id)
            self._held.add(thread_id)

    async def _release(self, thread_id: str) -> None:
        async with self._lock:
            self._held.discard(thread_id)
            if self._conn is None or self._conn.closed:
                return  # the session ended, and every lock it held with it
            try:
                await self._conn.execute(UNLOCK, (thread_id,))
            except psycopg.Error as error:
                # Never raised: it would replace the error that ended the drive, and a broken
                # session holds no locks anyway.
                log.warning("lease of run %s: unlock failed (%s); its session is gone, so is the lock", thread_id, error)
                await self._conn.close()

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            return await self._reconnect()
        return self._conn

    async def _reconnect(self) -> psycopg.AsyncConnection:
        """A new session; the leases of runs still driven here are taken again on it."""
        if self._conn is not None:
            await self._conn.close()
        self._conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S
        )
        for held in sorted(self._held):
            if not await self._try_lock(self._conn, held):
                log.error("lease of run %s was lost with its session and is now held by another driver", held)
        return self._conn

    @staticmethod
    async def _try_lock(conn: psycopg.AsyncConnection, thread_id: str) -> bool:
        row = await (await conn.execute(TRY_LOCK, (thread_id,))).fetchone()
        return bool(row and row["locked"])
