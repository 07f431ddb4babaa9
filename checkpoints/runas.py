"""runas: run PostgreSQL's server programs as an unprivileged user when we are root.

PostgreSQL refuses to run as root. Owns the choice of that user (the data dir's owner, else
`postgres`, else a system user `boundloop` created on first use), the check that the user can
reach the data dir, and the runuser/su wrapping. Never decides what to run or when.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from boundloop.checkpoints.errors import ClusterStartFailed

PREFERRED_USER = "postgres"
OWN_USER = "boundloop"
ROOT_DATA_DIR = Path("/var/lib/boundloop/pgdata")
"""The default data dir as root: /root is 0700, so the server's user could not reach one there."""


def server_account(data_dir: Path, *, initialised: bool) -> pwd.struct_passwd | None:
    """None when we are not root (programs run as we are). As root: the owner of an initialised
    data dir, else `PREFERRED_USER`, else `OWN_USER`, created on first use."""
    if os.geteuid() != 0:
        return None
    if initialised:
        return pwd.getpwuid(data_dir.stat().st_uid)
    for name in (PREFERRED_USER, OWN_USER):
        with suppress(KeyError):
            return pwd.getpwnam(name)
    _create_own_user(data_dir)
    return pwd.getpwnam(OWN_USER)


def run(
    command: Sequence[str], account: pwd.struct_passwd | None
) -> subprocess.CompletedProcess[str]:
    """Run `command` as `account` (or as we are, for None), its output captured."""
    if account is not None:
        command = _as_user(account.pw_name, command)
    return subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/",
        env={**os.environ, "LC_ALL": "C"},
    )


def check_reachable(data_dir: Path, account: pwd.struct_passwd) -> None:
    """Raise `ClusterStartFailed` naming the first parent of `data_dir` the user cannot search."""
    groups = set(os.getgrouplist(account.pw_name, account.pw_gid))
    for directory in reversed(data_dir.parents):
        if not _searchable(directory, account.pw_uid, groups):
            raise ClusterStartFailed(
                data_dir,
                f"{directory} is not searchable by {account.pw_name!r}, the user PostgreSQL "
                "runs as",
                f"set BOUNDLOOP_HOME to a directory outside {directory} (as root the default "
                f"data dir is {ROOT_DATA_DIR}), or allow traversal with `chmod o+x {directory}`",
            )


def _searchable(directory: Path, uid: int, groups: set[int]) -> bool:
    info = directory.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _as_user(user: str, command: Sequence[str]) -> list[str]:
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *command]
    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(command)]


def _create_own_user(data_dir: Path) -> None:
    print(f"boundloop: creating system user {OWN_USER!r} to run PostgreSQL (it refuses root)",
          file=sys.stderr)
    command = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
               "--shell", "/usr/sbin/nologin", OWN_USER]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterStartFailed(
            data_dir,
            f"useradd {OWN_USER} exited {done.returncode}: {done.stderr.strip() or 'no output'}",
            f"create an unprivileged user named {OWN_USER!r} or {PREFERRED_USER!r}",
        )
