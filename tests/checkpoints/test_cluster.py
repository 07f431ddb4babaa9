"""The embedded local cluster: created on demand, loopback only, reused, restarted, and run by
an unprivileged user when we are root."""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import psycopg
import pytest

from boundloop.checkpoints import ClusterStartFailed, LocalCluster, default_data_dir
from boundloop.checkpoints import runas

as_root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the root path runs only as root")


@pytest.fixture(scope="module")
def running(
    throwaway_cluster: Callable[[], AbstractContextManager[LocalCluster]],
) -> Iterator[LocalCluster]:
    """One started cluster shared by the tests of this module that only read from it."""
    with throwaway_cluster() as shared:
        shared.ensure_running()
        yield shared


def _one(url: str, sql: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return row[0]


def _backend_uid(url: str) -> int:
    """The user the server runs as: the owner of this connection's backend, read while the
    connection (and so the backend process) is still open."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return Path(f"/proc/{row[0]}").stat().st_uid


def test_ensure_running_returns_the_url_of_the_boundloop_database(running: LocalCluster) -> None:
    """The DSN names the loopback address, the persisted port and the `boundloop` database."""
    url = running.ensure_running()
    assert url == f"postgresql://postgres@127.0.0.1:{running.status().port}/boundloop"
    assert _one(url, "SELECT current_database()") == "boundloop"


def test_the_server_listens_on_loopback_only(running: LocalCluster) -> None:
    """Trust authentication is acceptable only because nothing off this machine can connect."""
    assert _one(running.url(), "SHOW listen_addresses") == "127.0.0.1"


def test_the_server_allows_at_least_200_connections(running: LocalCluster) -> None:
    """Fifty concurrent runs, each with its own pool, fit."""
    assert int(str(_one(running.url(), "SHOW max_connections"))) >= 200


def test_a_running_server_is_reused_not_restarted(running: LocalCluster) -> None:
    """A second ensure_running finds the server up and leaves it alone."""
    started = _one(running.url(), "SELECT pg_postmaster_start_time()")
    running.ensure_running()
    assert _one(running.url(), "SELECT pg_postmaster_start_time()") == started


def test_status_goes_from_absent_to_running_to_stopped(cluster: LocalCluster) -> None:
    """The port is unknown until initdb and kept from then on."""
    absent = cluster.status()
    cluster.ensure_running()
    running = cluster.status()
    cluster.stop()
    stopped = cluster.status()
    assert (absent.state, absent.port) == ("absent", None)
    assert running.state == "running"
    assert (stopped.state, stopped.port) == ("stopped", running.port)


def test_a_stopped_cluster_restarts_on_its_persisted_port(cluster: LocalCluster) -> None:
    """The port chosen at initdb is kept, so a DSN handed out earlier stays valid."""
    first = cluster.ensure_running()
    cluster.stop()
    assert cluster.ensure_running() == first
    assert _one(first, "SELECT 1") == 1


def test_a_stale_pid_file_left_by_a_crash_does_not_block_a_restart(cluster: LocalCluster) -> None:
    """A crash leaves postmaster.pid behind naming a dead process; the cluster starts anyway."""
    url = cluster.ensure_running()
    pid_file = cluster.data_dir / "postmaster.pid"
    left_behind = pid_file.read_text().splitlines()
    cluster.stop()
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file.write_text("\n".join([str(dead.pid), *left_behind[1:]]) + "\n")
    owner = cluster.data_dir.stat()
    os.chown(pid_file, owner.st_uid, owner.st_gid)

    assert cluster.ensure_running() == url
    assert _one(url, "SELECT 1") == 1


def test_boundloop_home_holds_the_default_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOUNDLOOP_HOME", "/srv/boundloop")
    assert default_data_dir() == Path("/srv/boundloop/pgdata")


@as_root_only
def test_as_root_the_default_data_dir_is_outside_root_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """/root is 0700, so the server's unprivileged user could not reach a data dir under it."""
    monkeypatch.delenv("BOUNDLOOP_HOME", raising=False)
    assert default_data_dir() == Path("/var/lib/boundloop/pgdata")


@as_root_only
def test_as_root_the_server_runs_as_the_unprivileged_owner_of_its_data_dir(
    running: LocalCluster,
) -> None:
    """PostgreSQL refuses root, so initdb and pg_ctl ran as another user, who owns the data."""
    server_uid = _backend_uid(running.url())
    assert server_uid != 0
    assert server_uid == running.data_dir.stat().st_uid


@pytest.fixture
def own_user(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A machine without a `postgres` user: the cluster must create its own user (removed after)."""
    name = f"bl-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(runas, "PREFERRED_USER", f"bl-absent-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(runas, "OWN_USER", name)
    yield name
    subprocess.run(["userdel", name], capture_output=True)


@as_root_only
def test_as_root_without_a_postgres_user_a_system_user_is_created_to_run_the_server(
    own_user: str, cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fallback account is a system user; creating it is announced on stderr."""
    url = cluster.ensure_running()
    assert _backend_uid(url) == pwd.getpwnam(own_user).pw_uid
    assert capsys.readouterr().err == (
        f"boundloop: creating system user {own_user!r} to run PostgreSQL (it refuses root)\n"
    )
    cluster.stop()


@as_root_only
def test_as_root_a_data_dir_the_server_user_cannot_reach_is_refused_with_the_fix(
    cluster: LocalCluster,
) -> None:
    """The closed parent is named before initdb runs, with the ways out."""
    closed = cluster.data_dir.parent / "closed"
    closed.mkdir(mode=0o700)
    data_dir = closed / "pgdata"
    with pytest.raises(ClusterStartFailed) as caught:
        LocalCluster(data_dir).ensure_running()
    assert str(caught.value) == (
        f"embedded PostgreSQL in {data_dir} failed: {closed} is not searchable by 'postgres', the "
        f"user PostgreSQL runs as. Fix: set BOUNDLOOP_HOME to a directory outside {closed} (as "
        f"root the default data dir is /var/lib/boundloop/pgdata), or allow traversal with "
        f"`chmod o+x {closed}`, or set BOUNDLOOP_DATABASE_URL to an existing PostgreSQL database."
    )
