"""memory_store: the LangGraph store that holds persistent memory, in boundloop's own database.

`AsyncPostgresStore` (langgraph-checkpoint-postgres) on a pool from `open_pool`; its tables
(`store`, `store_migrations`) are created once, serialised across processes like the saver's.
No vector index: semantic search is used only where a store with an embedding index is given
(the LangGraph server's, configured in langgraph.json `store.index`).
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.saver import setup_exclusively

_SETUP_LOCK = int.from_bytes(b"bl-store", "big")
"""Advisory lock held while the store's tables are created (the saver has its own)."""
_STORES: WeakKeyDictionary[AsyncConnectionPool, AsyncPostgresStore] = WeakKeyDictionary()


async def memory_store(pool: AsyncConnectionPool) -> AsyncPostgresStore:
    """The store on `pool`, its tables set up on first use in this process."""
    store = _STORES.get(pool)
    if store is None:  # two first callers both set up: harmless, setup is serialised and idempotent
        async with pool.connection() as conn:
            await setup_exclusively(conn, _SETUP_LOCK, AsyncPostgresStore(conn).setup)
        store = _STORES[pool] = AsyncPostgresStore(pool)
    return store
