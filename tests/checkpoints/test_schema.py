"""boundloop's own tables: an ordered list of migrations, each applied once, even by concurrent
callers."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import MIGRATIONS, migrate, open_pool

TABLES = {
    "boundloop_migrations",
    "boundloop_runs",
    "boundloop_trace",
    "boundloop_trace_heads",
    "boundloop_payloads",
    "boundloop_ledger",
    "boundloop_model_calls",
    "boundloop_approvals",
    "boundloop_langsmith_roots",
    "boundloop_eval_runs",
    "boundloop_tool_listings",
}


def _applied_versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [v for (v,) in conn.execute("SELECT v FROM boundloop_migrations ORDER BY v")]


async def test_migrate_on_an_empty_database_creates_every_table(db_url: str) -> None:
    async with await open_pool(db_url) as pool:
        version = await migrate(pool)
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'boundloop_%'")
        assert {name for (name,) in rows} == TABLES
    assert version == len(MIGRATIONS) - 1
    assert _applied_versions(db_url) == list(range(len(MIGRATIONS)))


async def test_migrate_again_is_a_no_op(pool: AsyncConnectionPool, db_url: str) -> None:
    """The `pool` fixture has migrated already; a second run applies nothing."""
    assert await migrate(pool) == len(MIGRATIONS) - 1
    assert _applied_versions(db_url) == list(range(len(MIGRATIONS)))


async def test_concurrent_migrations_from_separate_pools_apply_each_version_once(
    db_url: str,
) -> None:
    """Separate pools stand in for separate processes racing on a fresh database."""
    pools = [await open_pool(db_url, max_size=1) for _ in range(6)]
    try:
        versions = await asyncio.gather(*(migrate(p) for p in pools))
    finally:
        await asyncio.gather(*(p.close() for p in pools))
    assert versions == [len(MIGRATIONS) - 1] * 6
    assert _applied_versions(db_url) == list(range(len(MIGRATIONS)))
