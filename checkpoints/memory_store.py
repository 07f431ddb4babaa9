"""memory_store: the LangGraph store that holds persistent memory, in boundloop's own database.

`AsyncPostgresStore` (langgraph-checkpoint-postgres) on a pool from `open_pool`; its tables
(`store`, `store_migrations`) are created once, serialised across processes like the saver's.
No vector index: semantic search is used only where a store with an embedding index is given
(the LangGraph server's, configured in langgraph.json `store.index`).
"""

from __future__ import annotations

import asyncio
from weakref import WeakKeyDictionary

from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

_SETUP_LOCK = 0x6D656D6F72790001
"""Advisory lock id held while the store's tables are created (distinct from the saver's)."""
_SETUP_POLL_S = 0.05
_STORES: WeakKeyDictionary[AsyncConnectionPool, AsyncPostgresStore] = WeakKeyDictionary()


async def memory_store(pool: AsyncConnectionPool) -> AsyncPostgresStore:
    """The store on `pool`, its tables set up on first use in this process."""
    store = _STORES.get(pool)
    if store is None:  # two first callers both set up: harmless, setup is serialised and idempotent
        await _setup_exclusively(pool)
        store = _STORES[pool] = AsyncPostgresStore(pool)
    return store


async def _setup_exclusively(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        while True:
            await cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (_SETUP_LOCK,))
            row = await cur.fetchone()
            if row is not None and row["locked"]:
                break
            await asyncio.sleep(_SETUP_POLL_S)
        try:
            await AsyncPostgresStore(conn).setup()
        finally:
            await cur.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
