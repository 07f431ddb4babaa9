"""model_calls: the write-ahead record of model calls (table `boundloop_model_calls`).

Owns the SQL. What a row's usage holds, and when an earlier execution's rows are charged, is
graph/models/write_ahead.py's business.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

EARLIER_CALLS = """
SELECT id, role, model, status, usage FROM boundloop_model_calls
WHERE thread_id = %(thread_id)s AND task = %(task)s AND execution <> %(execution)s"""
"""The rows every other execution of a task left."""
OPEN_CALL = f"""
WITH earlier AS ({EARLIER_CALLS} AND %(earlier)s),
opened AS (
  INSERT INTO boundloop_model_calls (thread_id, task, execution, role, model, status, usage)
  VALUES (%(thread_id)s, %(task)s, %(execution)s, %(role)s, %(model)s, 'INTENT', %(usage)s)
  RETURNING id)
SELECT (SELECT id FROM opened) AS id,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('role', role, 'model', model, 'status', status, 'usage', usage)
                                  ORDER BY id), '[]'::jsonb) FROM earlier) AS earlier"""


async def open_call(
    pool: AsyncConnectionPool, *, thread_id: str, task: str, execution: str, role: str, model: str,
    reserved: dict[str, Any], earlier: bool,
) -> tuple[int, list[dict[str, Any]]]:
    """Record a call as INTENT with its `reserved` usage; return its row id and, when `earlier`, the
    rows (role, model, status, usage) every other execution of `task` left, oldest first. One round trip."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(OPEN_CALL, dict(thread_id=thread_id, task=task, execution=execution, role=role, model=model,
                                          usage=Jsonb(reserved), earlier=earlier))
        row = await cur.fetchone()
    assert row is not None
    return row["id"], row["earlier"]


async def earlier_calls(pool: AsyncConnectionPool, *, thread_id: str, task: str, execution: str) -> list[dict[str, Any]]:
    """The rows every other execution of `task` left (role, model, status, usage), oldest first."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"{EARLIER_CALLS} ORDER BY id", dict(thread_id=thread_id, task=task, execution=execution))
        return await cur.fetchall()


async def answer_call(pool: AsyncConnectionPool, call_id: int, usage: dict[str, Any]) -> None:
    """INTENT → ANSWERED with what the reply cost."""
    async with pool.connection() as conn:
        await conn.execute("UPDATE boundloop_model_calls SET status = 'ANSWERED', usage = %s, updated_at = now() WHERE id = %s",
                           (Jsonb(usage), call_id))


async def withdraw_call(pool: AsyncConnectionPool, call_id: int) -> None:
    """Delete the record of a call that was never sent."""
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM boundloop_model_calls WHERE id = %s AND status = 'INTENT'", (call_id,))
