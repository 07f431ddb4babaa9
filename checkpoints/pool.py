"""pool: which database boundloop uses, and the connection pool onto it.

Owns the URL precedence (BOUNDLOOP_DATABASE_URL, DATABASE_URL, the embedded cluster) and turns an
unreachable database into `DatabaseUnavailable`. Never creates tables (`schema`, `saver`).
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from boundloop.checkpoints.cluster import LocalCluster, default_data_dir
from boundloop.checkpoints.errors import DatabaseUnavailable

URL_VARIABLES = ("BOUNDLOOP_DATABASE_URL", "DATABASE_URL")
CONNECTION_KWARGS = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
"""What AsyncPostgresSaver needs: setup() runs CREATE INDEX CONCURRENTLY (autocommit only) and its
queries read rows as dicts."""
CONNECT_TIMEOUT_S = 10
_PASSWORD_PARAM = re.compile(r"(password=)[^&\s]+")


def database_url(*, install: bool = False) -> str:
    """The first of BOUNDLOOP_DATABASE_URL and DATABASE_URL that is set, else the embedded
    cluster's DSN (starting it; `install` lets it apt-get install PostgreSQL as root).

    Blocking: from async code call it through `asyncio.to_thread`.
    """
    for variable in URL_VARIABLES:
        if url := os.environ.get(variable):
            return url
    return LocalCluster(default_data_dir(), install=install).ensure_running()


async def open_pool(url: str, *, max_size: int = 10) -> AsyncConnectionPool:
    """An open pool on `url`, its first connection made; close it with `async with` or `close()`.

    Raises `DatabaseUnavailable` (password masked) when the database does not answer.
    """
    await _probe(url)
    pool = AsyncConnectionPool(
        url, min_size=1, max_size=max_size, kwargs=dict(CONNECTION_KWARGS), open=False
    )
    try:
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    except PoolTimeout:
        await pool.close()
        reason = f"no connection within {CONNECT_TIMEOUT_S} s"
        raise DatabaseUnavailable(masked(url), reason) from None
    return pool


def masked(url: str) -> str:
    """`url` with its password replaced by ***, in URL or key=value form."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    return _PASSWORD_PARAM.sub(r"\1***", urlunsplit(parts))


async def _probe(url: str) -> None:
    """Connect once, so a refused connection fails now with its reason, not after the pool's
    retries time out."""
    try:
        connection = await psycopg.AsyncConnection.connect(url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        reason = " ".join(str(error).strip().splitlines()[0].split())
        raise DatabaseUnavailable(masked(url), reason) from None
    await connection.close()
