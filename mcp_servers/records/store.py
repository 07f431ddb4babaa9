"""store: the SQL of the record store, one function per statement, on a connection the caller holds.

Owns the queries and the idempotency-key claim. Never opens a transaction or a connection (the
server wraps each tool call in one transaction) and never decides what the model is told.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed
from psycopg.types.json import Jsonb

from boundloop.mcp_servers.records.models import Record

_COLUMNS = SQL("collection, id, data, version, created_at, updated_at")


async def claim(conn: AsyncConnection, key: str, request: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
    """Claim `key` for `request` (the tool and its arguments), or return (request, response) stored
    by the call that claimed it first (a key stored with its tool alone, without its arguments, has only its tool).

    The claim is a row inserted in the caller's transaction: a concurrent call with the same key
    waits on it, then reads the committed response; if this transaction rolls back, so does the claim.
    """
    async with conn.cursor() as cur:
        await cur.execute(
            "INSERT INTO record_idempotency (key, tool, request) VALUES (%s, %s, %s)"
            " ON CONFLICT (key) DO NOTHING RETURNING key",
            (key, request["tool"], Jsonb(request)),
        )
        if await cur.fetchone() is not None:
            return None
        await cur.execute("SELECT tool, request, response FROM record_idempotency WHERE key = %s", (key,))
        row = await cur.fetchone()
    assert row is not None, "a conflicting key row exists once the insert conflicted"
    tool, stored, response = row
    return (stored if stored is not None else {"tool": tool}), response


async def remember(conn: AsyncConnection, key: str, response: dict[str, Any]) -> None:
    await conn.execute("UPDATE record_idempotency SET response = %s WHERE key = %s", (Jsonb(response), key))


async def fetch(conn: AsyncConnection, collection: str, id: str, *, lock: bool = False) -> Record | None:
    statement = SQL("SELECT {} FROM records WHERE collection = %s AND id = %s").format(_COLUMNS)
    if lock:
        statement += SQL(" FOR UPDATE")
    return await _one(conn, statement, (collection, id))


async def insert(conn: AsyncConnection, collection: str, id: str, data: dict[str, Any]) -> Record | None:
    """The new record, or None when (collection, id) is taken."""
    statement = SQL(
        "INSERT INTO records (collection, id, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING {}"
    ).format(_COLUMNS)
    return await _one(conn, statement, (collection, id, Jsonb(data)))


async def replace_data(conn: AsyncConnection, collection: str, id: str, data: dict[str, Any]) -> Record | None:
    statement = SQL(
        "UPDATE records SET data = %s, version = version + 1, updated_at = now()"
        " WHERE collection = %s AND id = %s RETURNING {}"
    ).format(_COLUMNS)
    return await _one(conn, statement, (Jsonb(data), collection, id))


async def delete(conn: AsyncConnection, collection: str, id: str) -> Record | None:
    statement = SQL("DELETE FROM records WHERE collection = %s AND id = %s RETURNING {}").format(_COLUMNS)
    return await _one(conn, statement, (collection, id))


async def select(conn: AsyncConnection, collection: str, where: dict[str, Any], limit: int) -> list[Record]:
    """Records of `collection` whose top-level keys equal every value in `where`, by id, at most `limit`."""
    conditions = [SQL("collection = %s")] + [SQL("data -> %s = %s")] * len(where)
    params: list[Any] = [collection]
    for key, value in where.items():
        params += [key, Jsonb(value)]
    statement = SQL("SELECT {} FROM records WHERE {} ORDER BY id LIMIT %s").format(
        _COLUMNS, SQL(" AND ").join(conditions)
    )
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, [*params, limit])
        return [Record.model_validate(row) for row in await cur.fetchall()]


async def _one(conn: AsyncConnection, statement: Composed, params: tuple[Any, ...]) -> Record | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, params)
        row = await cur.fetchone()
    return None if row is None else Record.model_validate(row)
