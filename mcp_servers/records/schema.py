"""schema: the record store's tables, created on startup when missing.

Owns the DDL and applying it. Never reads or writes records.
"""

from __future__ import annotations

from psycopg import AsyncConnection

SCHEMA = [  # applied in order at every start; each statement is a no-op once applied; append, never edit
    """
    CREATE TABLE IF NOT EXISTS records (
        collection text NOT NULL,
        id text NOT NULL,
        data jsonb NOT NULL,
        version integer NOT NULL DEFAULT 1,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (collection, id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS record_idempotency (
        key text PRIMARY KEY,
        tool text NOT NULL,
        response jsonb
    )
    """,
    # What the key was first used for: a reuse for anything else is refused, not answered.
    "ALTER TABLE record_idempotency ADD COLUMN IF NOT EXISTS request jsonb",
]


async def ensure_schema(conn: AsyncConnection) -> None:
    """Create the tables if missing. Servers starting together on one database take turns."""
    async with conn.transaction():
        # CREATE TABLE IF NOT EXISTS is not safe against itself running concurrently.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('boundloop-records-schema'))")
        for statement in SCHEMA:
            await conn.execute(statement)
