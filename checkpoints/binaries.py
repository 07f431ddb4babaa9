"""binaries: find the PostgreSQL server programs (initdb, pg_ctl, postgres) on this machine.

Owns the search order and the one opt-in install with apt-get. Never runs a server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from boundloop.checkpoints.errors import PostgresNotInstalled

SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
SEARCHED = "pg_config --bindir, PATH, /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin"
APT_COMMANDS = (
    ("apt-get", "update"),
    ("apt-get", "install", "-y", "--no-install-recommends", "postgresql"),
)


def server_bindir(*, install: bool = False) -> Path:
    """The directory holding the server programs.

    With none found and `install`, as root on a system with apt-get, installs the `postgresql`
    package first (saying so on stderr). Otherwise raises `PostgresNotInstalled`.
    """
    found = find_server_bindir()
    if found is not None:
        return found
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        _apt_install()
        found = find_server_bindir()
        if found is not None:
            return found
    raise PostgresNotInstalled(
        f"PostgreSQL server binaries (initdb, pg_ctl) not found in {SEARCHED}"
    )


def find_server_bindir() -> Path | None:
    """The first directory, in the order of `SEARCHED`, that holds every server program."""
    return next((d for d in _candidate_dirs() if _holds_server(d)), None)


def _candidate_dirs() -> Iterator[Path]:
    if pg_config := shutil.which("pg_config"):
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if done.returncode == 0:
            yield Path(done.stdout.strip())
    for program in ("initdb", "pg_ctl"):
        if on_path := shutil.which(program):
            # Debian links these into /usr/local/bin or /usr/bin; the real dir holds `postgres`.
            yield Path(on_path).resolve().parent
    yield from _newest_first(Path("/usr/lib/postgresql").glob("*/bin"))
    yield from _newest_first(Path("/usr").glob("pgsql-*/bin"))


def _newest_first(dirs: Iterator[Path]) -> list[Path]:
    def version(bindir: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name))

    return sorted(dirs, key=version, reverse=True)


def _holds_server(bindir: Path) -> bool:
    return all(os.access(bindir / program, os.X_OK) for program in SERVER_PROGRAMS)


def _apt_install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in APT_COMMANDS:
        print(f"boundloop: PostgreSQL not found; running: {' '.join(command)}", file=sys.stderr)
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise PostgresNotInstalled(
                f"{' '.join(command)} failed (exit {done.returncode}): {tail or 'no output'}"
            )
