"""server: the checkpointer factory `langgraph.json` names for `langgraph dev` and the server.

    "checkpointer": {"path": "./checkpoints/server.py:checkpointer"}

Owns nothing else: the database comes from `database_url`, the saver from `postgres_saver`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from boundloop.checkpoints.pool import database_url
from boundloop.checkpoints.saver import BoundloopSaver, postgres_saver


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BoundloopSaver]:
    """The saver for the configured database, held open for the server's lifetime."""
    _versions_from_the_saver()
    # database_url may start the embedded cluster (subprocesses); the server's event loop
    # rejects blocking calls, so it runs in a thread.
    url = await asyncio.to_thread(database_url)
    async with postgres_saver(url) as saver:
        yield saver


def _versions_from_the_saver() -> None:
    """Make the server's graphs take their channel versions from the saver.

    The server wraps the saver in an adapter with a get_next_version of its own (the Postgres
    saver's 32 digits), which the graph calls instead of ours. A thread moves between the server
    and the CLI (graph/README.md, "What survives where"): after our shorter versions, the adapter's would
    compare smaller and the run would stop. Only under the server (langgraph_api loaded); should
    the adapter move, the import fails.
    """
    if "langgraph_api" not in sys.modules:
        return
    from langgraph_api._checkpointer._adapter import _CustomCheckpointerAdapter

    def get_next_version(adapter: Any, current: str | None, channel: None) -> str:
        return adapter._inner.get_next_version(current, channel)

    _CustomCheckpointerAdapter.get_next_version = get_next_version  # type: ignore[method-assign]
