"""eval_runs: typed reads and writes of the stored suite runs (`boundloop eval`), one row per run.

Owns the SQL and the row type; what a report holds is the evaluation harness's business. Every
query is parameterised and reads only this table: a suite run never reaches another run's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

COLUMNS = "id, suite, quick, started_at, seconds, passed, report"


@dataclass(frozen=True)
class EvalRun:
    id: int
    suite: str
    quick: bool
    """Only the suite's quick selection ran."""
    started_at: datetime
    seconds: float
    passed: bool
    report: dict[str, Any]
    """Metrics with thresholds and met/missed, families, and each scenario run."""


async def save_eval_run(pool: AsyncConnectionPool, *, suite: str, quick: bool, started_at: datetime, seconds: float,
                        passed: bool, report: dict[str, Any]) -> EvalRun:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"INSERT INTO boundloop_eval_runs (suite, quick, started_at, seconds, passed, report)"
                          f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {COLUMNS}",
                          (suite, quick, started_at, seconds, passed, Jsonb(report)))
        row = await cur.fetchone()
    assert row is not None  # INSERT ... RETURNING gives its row
    return EvalRun(**row)


async def eval_runs(pool: AsyncConnectionPool, *, suite: str | None = None, quick: bool | None = None, upto: int | None = None,
                    limit: int = 20) -> list[EvalRun]:
    """The newest stored suite runs first, of one suite and selection when given, up to run `upto` when given."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"SELECT {COLUMNS} FROM boundloop_eval_runs"
                          " WHERE (%(suite)s::text IS NULL OR suite = %(suite)s) AND (%(quick)s::boolean IS NULL OR quick = %(quick)s)"
                          " AND (%(upto)s::bigint IS NULL OR id <= %(upto)s)"
                          " ORDER BY id DESC LIMIT %(limit)s",
                          {"suite": suite, "quick": quick, "upto": upto, "limit": limit})
        return [EvalRun(**row) for row in await cur.fetchall()]


async def eval_run(pool: AsyncConnectionPool, run_id: int) -> EvalRun | None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"SELECT {COLUMNS} FROM boundloop_eval_runs WHERE id = %s", (run_id,))
        row = await cur.fetchone()
    return EvalRun(**row) if row else None
