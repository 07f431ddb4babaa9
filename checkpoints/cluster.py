"""cluster: the embedded PostgreSQL that boundloop runs when no database URL is configured.

Owns one data directory: initdb, the loopback-only configuration with its persisted port, start,
stop, status and the `boundloop` database. As root the server programs run as an unprivileged
user (`runas`). Never creates tables and never opens pools (`schema`, `pool`).

Trust authentication is safe here only because the server listens on 127.0.0.1 and on a Unix
socket inside its own 0700 data directory: nothing off this machine can reach it.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg

from boundloop.checkpoints import runas
from boundloop.checkpoints.binaries import server_bindir
from boundloop.checkpoints.errors import ClusterStartFailed, ClusterStopFailed

DATABASE = "boundloop"
SUPERUSER = "postgres"
CONFIG_FILE = "boundloop.conf"
"""Our settings, in the data dir, included from postgresql.conf. The port lives here."""
LOG_FILE = "server.log"
_WAIT = ("-w", "-t", "60")  # pg_ctl: wait for the server, at most 60 s
_PORT_LINE = re.compile(r"^port = (\d+)$", re.MULTILINE)


def state_dir() -> Path:
    """Where boundloop keeps what it writes on this machine (the cluster, MCP server logs, the
    demo's workspaces): `$BOUNDLOOP_HOME`; without it, `runas.ROOT_DATA_DIR`'s parent for root and
    `~/.local/share/boundloop` for everyone else. Never the current directory."""
    if home := os.environ.get("BOUNDLOOP_HOME"):
        return Path(home).expanduser()
    if os.geteuid() == 0:
        return runas.ROOT_DATA_DIR.parent
    return Path.home() / ".local" / "share" / "boundloop"


def default_data_dir() -> Path:
    """`pgdata` in the state directory (`state_dir`)."""
    return state_dir() / "pgdata"


@dataclass(frozen=True)
class ClusterStatus:
    """What `LocalCluster.status` reports; asking starts nothing."""

    state: Literal["absent", "stopped", "running"]
    """absent: no cluster initialised in `data_dir` yet."""
    data_dir: Path
    port: int | None
    """Chosen once at initdb and kept; None while absent."""


class LocalCluster:
    """One PostgreSQL cluster in `data_dir`, created and started on demand."""

    def __init__(self, data_dir: Path, *, install: bool = False, durable: bool = True) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self.install = install
        """Allow `ensure_running` to apt-get install PostgreSQL (root only) when it is missing."""
        self.durable = durable
        """False trades crash safety for speed (no fsync): for throwaway test clusters."""

    def ensure_running(self) -> str:
        """Initialise, configure and start the cluster as needed; return the `boundloop` DSN.

        Reuses a running server, restarts a stopped one and is safe against concurrent callers.
        """
        with self._locked():
            bindir = server_bindir(install=self.install)
            if not self._is_initialised():
                self._initdb(bindir)
            if self._port() is None:
                self._configure()
            if not self._is_running(bindir):
                self._start(bindir)
            self._create_database()
        return self.url()

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended); a no-op when not running."""
        if not self._is_initialised():
            return
        bindir = server_bindir()
        with self._locked():
            if not self._is_running(bindir):
                return
            pg_ctl = str(bindir / "pg_ctl")
            done = self._run(pg_ctl, "stop", "-D", str(self.data_dir), "-m", "fast", *_WAIT)
            if done.returncode != 0:
                reason = f"pg_ctl stop exited {done.returncode}: {_tail(done.stderr)}"
                raise ClusterStopFailed(self.data_dir, reason)

    def status(self) -> ClusterStatus:
        """absent, stopped or running, with the persisted port."""
        if not self._is_initialised():
            return ClusterStatus("absent", self.data_dir, None)
        state = "running" if self._is_running(server_bindir()) else "stopped"
        return ClusterStatus(state, self.data_dir, self._port())

    def url(self, database: str = DATABASE) -> str:
        """The DSN of `database` on this cluster (the cluster must have been initialised)."""
        port = self._port()
        if port is None:
            raise ClusterStartFailed(
                self.data_dir, f"no port in {CONFIG_FILE}", "call ensure_running() first"
            )
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"

    # -- steps of ensure_running ------------------------------------------------------------

    def _initdb(self, bindir: Path) -> None:
        account = self._account()
        self.data_dir.mkdir(exist_ok=True)
        if account is not None:
            runas.check_reachable(self.data_dir, account)
            os.chown(self.data_dir, account.pw_uid, account.pw_gid)
        self.data_dir.chmod(0o700)
        command = [str(bindir / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", SUPERUSER]
        command += ["-E", "UTF8", "--no-locale"]
        if not self.durable:
            command.append("--no-sync")
        done = self._run(*command)
        if done.returncode != 0:
            raise ClusterStartFailed(
                self.data_dir,
                f"initdb exited {done.returncode}: {_tail(done.stderr)}",
                f"remove {self.data_dir} if it holds nothing you need, then retry",
            )

    def _configure(self) -> None:
        socket_dir = str(self.data_dir).replace("'", "''")
        settings = [
            "# Written once by boundloop (checkpoints/cluster.py). Trust auth is safe only while",
            "# the server listens on loopback and on a socket inside this 0700 directory.",
            "listen_addresses = '127.0.0.1'",
            f"port = {_free_port()}",
            f"unix_socket_directories = '{socket_dir}'",
            "max_connections = 200",
        ]
        if not self.durable:
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        config = self.data_dir / CONFIG_FILE
        config.write_text("\n".join(settings) + "\n")
        owner = self.data_dir.stat()
        os.chown(config, owner.st_uid, owner.st_gid)
        with open(self.data_dir / "postgresql.conf", "a") as main_config:
            main_config.write(f"\ninclude '{CONFIG_FILE}'\n")

    def _start(self, bindir: Path) -> None:
        log = self.data_dir / LOG_FILE
        pg_ctl = str(bindir / "pg_ctl")
        done = self._run(pg_ctl, "start", "-D", str(self.data_dir), "-l", str(log), *_WAIT)
        if done.returncode != 0:
            reason = _tail(log.read_text(errors="replace")) if log.exists() else _tail(done.stderr)
            raise ClusterStartFailed(
                self.data_dir,
                f"pg_ctl start exited {done.returncode}: {reason}",
                f"read {log}; if port {self._port()} is taken, set another port in "
                f"{self.data_dir / CONFIG_FILE}",
            )

    def _create_database(self) -> None:
        try:
            with psycopg.connect(self.url(SUPERUSER), autocommit=True, connect_timeout=10) as conn:
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if found.fetchone() is None:
                    conn.execute(f"CREATE DATABASE {DATABASE}")
        except psycopg.OperationalError as error:
            raise ClusterStartFailed(
                self.data_dir,
                f"pg_ctl reports a server, but port {self._port()} refuses connections "
                f"({str(error).splitlines()[0]})",
                f"if no PostgreSQL runs on this data dir, delete "
                f"{self.data_dir / 'postmaster.pid'} and retry",
            ) from error

    # -- helpers ---------------------------------------------------------------------------

    def _is_initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def _port(self) -> int | None:
        config = self.data_dir / CONFIG_FILE
        found = _PORT_LINE.search(config.read_text()) if config.is_file() else None
        return int(found.group(1)) if found else None

    def _is_running(self, bindir: Path) -> bool:
        # pg_ctl status checks the pid in postmaster.pid, so a stale pid file reads as stopped.
        return self._run(str(bindir / "pg_ctl"), "status", "-D", str(self.data_dir)).returncode == 0

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise processes that manage this data dir (two CLIs starting at once)."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir.with_name(self.data_dir.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a server program, as the server's unprivileged user when we are root."""
        return runas.run(command, self._account())

    def _account(self) -> pwd.struct_passwd | None:
        return runas.server_account(self.data_dir, initialised=self._is_initialised())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(text: str) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()][-3:]
    return " | ".join(kept) or "no output"
