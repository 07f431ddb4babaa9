"""tool_listings: the last tool listing kept per set of servers (table `boundloop_tool_listings`).

Owns the SQL. What a key hashes, which servers may have their listing kept, and how old a kept
listing may be are tools/kept_listing.py's business; the rows hold the pins as intake writes them
(tools/pinning.py).
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool


async def kept_pins(pool: AsyncConnectionPool, servers_key: str, *, max_age_s: float) -> dict[str, Any] | None:
    """The pins kept for these servers, when they were listed less than `max_age_s` ago."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT pins FROM boundloop_tool_listings"
                          " WHERE servers_key = %s AND listed_at > now() - make_interval(secs => %s)",
                          (servers_key, max_age_s))
        row = await cur.fetchone()
    return row["pins"] if row else None


async def keep_pins(pool: AsyncConnectionPool, servers_key: str, pins: dict[str, Any]) -> None:
    """Keep `pins` as these servers' listing, as of now (replacing any kept before)."""
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO boundloop_tool_listings (servers_key, pins) VALUES (%s, %s)"
                           " ON CONFLICT (servers_key) DO UPDATE SET pins = EXCLUDED.pins, listed_at = now()",
                           (servers_key, Jsonb(pins)))
