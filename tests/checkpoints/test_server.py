"""The checkpointer factory that langgraph.json names."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from boundloop.checkpoints.server import checkpointer


async def test_checkpointer_yields_a_saver_on_boundloop_database_url(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOUNDLOOP_DATABASE_URL", db_url)
    async with checkpointer() as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None
