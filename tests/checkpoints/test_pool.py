"""Choosing the database and opening a pool on it; a database that does not answer is a clear
error, never a psycopg traceback."""

from __future__ import annotations

import socket

import pytest

from boundloop.checkpoints import DatabaseUnavailable, LocalCluster, database_url, masked, open_pool

FIX = (
    "Fix: start PostgreSQL there, or point BOUNDLOOP_DATABASE_URL at a reachable database (unset "
    "it to use the embedded local cluster)."
)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_closed_port_is_reported_with_the_masked_url_and_the_fix() -> None:
    port = _closed_port()
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_pool(f"postgresql://postgres:s3cret@127.0.0.1:{port}/boundloop")
    assert str(caught.value) == (
        f"database unavailable at postgresql://postgres:***@127.0.0.1:{port}/boundloop: "
        f'connection failed: connection to server at "127.0.0.1", port {port} failed: '
        f"Connection refused. {FIX}"
    )


async def test_a_stopped_local_cluster_is_reported_unavailable(cluster: LocalCluster) -> None:
    """The URL outlives the server; using it after stop() names the refusal, not a timeout."""
    url = cluster.ensure_running()
    cluster.stop()
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_pool(url)
    assert caught.value.reason.endswith("failed: Connection refused")


async def test_pool_connections_autocommit_and_read_rows_as_dicts(db_url: str) -> None:
    """AsyncPostgresSaver.setup() needs autocommit; its queries read rows by column name."""
    async with await open_pool(db_url) as pool, pool.connection() as conn:
        row = await (await conn.execute("SELECT 1 AS one")).fetchone()
        assert conn.autocommit is True
        assert row == {"one": 1}


def test_masked_hides_the_password_in_urls_and_in_key_value_strings() -> None:
    assert masked("postgresql://u:pw@h:5432/db?sslmode=disable") == (
        "postgresql://u:***@h:5432/db?sslmode=disable"
    )
    assert masked("postgresql://h/db?user=u&password=pw") == "postgresql://h/db?user=u&password=***"
    assert masked("host=h password=pw dbname=db") == "host=h password=*** dbname=db"
    assert masked("postgresql://u@h/db") == "postgresql://u@h/db"


def test_boundloop_database_url_wins_over_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOUNDLOOP_DATABASE_URL", "postgresql://a/boundloop")
    monkeypatch.setenv("DATABASE_URL", "postgresql://b/app")
    assert database_url() == "postgresql://a/boundloop"


def test_database_url_is_used_when_boundloop_database_url_is_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BOUNDLOOP_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://b/app")
    assert database_url() == "postgresql://b/app"


def test_without_either_variable_the_cluster_under_boundloop_home_is_started(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOUNDLOOP_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("BOUNDLOOP_HOME", str(cluster.data_dir.parent))
    url = database_url()
    assert cluster.status().state == "running"
    assert url == cluster.url()
