"""Session-wide test fixtures: the database, and the check that no server outlives the suite.

One throwaway PostgreSQL cluster per test session (or the server named by
BOUNDLOOP_TEST_ADMIN_URL, a postgresql:// URL of a superuser), and a fresh database per test.
Sub-directories add their own conftest for everything else.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import LocalCluster, migrate, open_pool
from tests.leftovers import adopt_orphans, wait_for_none


@pytest.fixture(scope="session", autouse=True)
def no_server_outlives_the_suite() -> Iterator[None]:
    """Every MCP server (ours, the probe, third-party) and dev server the suite starts is reaped.

    Only this session's own process tree is looked at: other users of the machine do not count.
    """
    adopt_orphans()
    yield
    if alive := wait_for_none():
        pytest.fail("server processes outlived the test suite:\n" + "\n".join(alive))


@contextmanager
def _throwaway_cluster() -> Iterator[LocalCluster]:
    """A not yet started, non-durable cluster in a new temp dir; stopped and deleted after."""
    base = Path(tempfile.mkdtemp(prefix="boundloop-pg-"))
    base.chmod(0o755)  # as root, the server's unprivileged user must traverse it
    cluster = LocalCluster(base / "pgdata", durable=False)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def _with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A superuser URL of the session's PostgreSQL server."""
    if url := os.environ.get("BOUNDLOOP_TEST_ADMIN_URL"):
        yield url
        return
    with _throwaway_cluster() as cluster:
        cluster.ensure_running()
        yield cluster.url("postgres")


@contextmanager
def fresh_database(admin_url: str, prefix: str = "t") -> Iterator[str]:
    """A fresh, empty database on the server of `admin_url`; dropped (its sessions ended) afterwards.
    For fixtures wider than one test, which cannot use the per-test `db_url`."""
    name = f"{prefix}_{uuid.uuid4().hex}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield _with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty database for this test; dropped (its sessions ended) afterwards."""
    with fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[AsyncConnectionPool]:
    """An open pool on this test's database, with boundloop's tables migrated."""
    async with await open_pool(db_url) as opened:
        await migrate(opened)
        yield opened


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A local cluster of its own, not yet started, for tests of the cluster itself."""
    with _throwaway_cluster() as fresh:
        yield fresh


@pytest.fixture(scope="session")
def throwaway_cluster() -> Callable[[], AbstractContextManager[LocalCluster]]:
    """`with throwaway_cluster() as c:` — a `cluster` for fixtures of a wider scope."""
    return _throwaway_cluster
