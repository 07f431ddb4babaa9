"""server: the checkpointer factory `langgraph.json` names for `langgraph dev` and the server.

    "checkpointer": {"path": "./checkpoints/server.py:checkpointer"}

Owns nothing else: the database comes from `database_url`, the saver from `postgres_saver`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from checkpoints.pool import database_url
from checkpoints.saver import BoundloopSaver, postgres_saver


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BoundloopSaver]:
    """The saver for the configured database, held open for the server's lifetime."""
    # database_url may start the embedded cluster (subprocesses); the server's event loop
    # rejects blocking calls, so it runs in a thread.
    url = await asyncio.to_thread(database_url)
    async with postgres_saver(url) as saver:
        yield saver
