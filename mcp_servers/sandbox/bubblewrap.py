"""bubblewrap: the command line that runs one sandbox child in bubblewrap, and whether that works here.

Owns which parts of the host a child sees and how it is started; never waits on or kills a child
(`runner` does). Each child runs in `bwrap` (Debian's `bubblewrap` package) with:
- new user, PID, mount, IPC, UTS and cgroup namespaces, and a new network namespace unless
  --allow-network (then the host's network); no nested user namespaces; no capabilities;
- a read-only view of /usr (and the /bin, /lib... links into it) and /etc; its own /proc (it sees
  only its own processes) and a minimal /dev; a private, empty /tmp; the sandbox root, read-write,
  at its own path, with what the hidden globs name under it masked (`masks`: the paths the run's
  policy denies do not exist in the child's view); nothing else of the host (no /home, /root, /run,
  /var, host sockets);
- `prlimit` limits: processes (counted in its own user namespace), CPU seconds, address space,
  file size, no core dumps;
- `--die-with-parent`, so killing bwrap (or the server) ends the whole PID namespace.

A server running as root starts bwrap as uid/gid 65534 (nobody), never as root: inside a user
namespace created by root, sandbox uids map to host root, the process limit does not apply, and
root-owned files such as /etc/shadow stay readable. The sandbox root is then given to that user,
and every directory above it must be searchable by it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boundloop.mcp_servers.sandbox.limits import Limits
from boundloop.mcp_servers.sandbox.masks import bwrap_flags
from boundloop.mcp_servers.sandbox.reaper import reap_adopted

SANDBOX_ID = 65534
"""The uid and gid a root server runs children as (Debian's nobody/nogroup)."""
PATH = "/usr/local/bin:/usr/bin:/bin"
PROBE_TIMEOUT_S = 30.0
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

NOT_INSTALLED = "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)"
UNREACHABLE = (
    "the sandbox user (uid {uid}) cannot reach the root {root}: {blocker} is mode {mode:o}; "
    "choose a root whose parent directories are searchable by others (chmod o+x), or run the server as a non-root user"
)
PROBE_FAILED = "bwrap cannot build the sandbox here ({detail}); the host must allow user namespaces"
NOT_STARTED = "the sandbox could not be started as uid {uid} ({detail})"


@dataclass(frozen=True)
class Sandbox:
    bwrap: str
    root: Path
    limits: Limits
    run_as: int | None
    """The uid (and gid) bwrap is started as; None to keep the server's own."""
    hidden: tuple[str, ...] = ()
    """Globs over real paths whose matches under the root each child sees masked."""

    def argv(self, command: list[str], cwd: Path) -> list[str]:
        """bwrap's command line running `command` in `cwd` (a directory inside the root)."""
        network = ["--share-net"] if self.limits.allow_network else []
        return [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            *network,
            "--disable-userns",
            "--die-with-parent",
            "--new-session",  # no controlling terminal: TIOCSTI cannot type into the server's
            "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr",
            *_system_links(),
            "--ro-bind", "/etc", "/etc",
            "--proc", "/proc",
            "--dev", "/dev",
            "--tmpfs", "/tmp",
            "--bind", str(self.root), str(self.root),
            *bwrap_flags(self.root, self.hidden),
            "--chdir", str(cwd),
            "--hostname", "sandbox",
            "--clearenv",
            "--setenv", "PATH", PATH,
            "--setenv", "HOME", str(self.root),
            "--setenv", "TMPDIR", "/tmp",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONUNBUFFERED", "1",  # output written before a kill is still captured
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            "--remount-ro", "/",
            "--",
            "prlimit", *self.limits.prlimit_flags(), "--",
            *command,
        ]  # fmt: skip

    def spawn_options(self) -> dict[str, Any]:
        """Keyword arguments for starting bwrap: the unprivileged user to start it as, if any."""
        if self.run_as is None:
            return {}
        return {"user": self.run_as, "group": self.run_as, "extra_groups": []}


def prepare(root: Path, limits: Limits, hidden: tuple[str, ...] = ()) -> Sandbox | str:
    """A sandbox over `root` that was seen to work here, or one line saying why there is none."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return NOT_INSTALLED
    run_as = SANDBOX_ID if os.geteuid() == 0 else None
    if run_as is not None:
        if blocker := _unsearchable_parent(root, run_as):
            return UNREACHABLE.format(uid=run_as, root=root, blocker=blocker, mode=stat.S_IMODE(blocker.stat().st_mode))
    sandbox = Sandbox(bwrap=bwrap, root=root, limits=limits, run_as=run_as, hidden=hidden)
    try:
        if run_as is not None and (root.stat().st_uid, root.stat().st_gid) != (run_as, run_as):
            os.chown(root, run_as, run_as)
        probe = subprocess.run(
            sandbox.argv(["true"], root),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            cwd="/",
            **sandbox.spawn_options(),
        )
    except OSError as exc:  # e.g. a host whose user namespace has no uid 65534
        return NOT_STARTED.format(uid=run_as, detail=exc)
    finally:
        reap_adopted()
    if probe.returncode != 0:
        detail = probe.stderr.strip().splitlines()[-1:] or [f"exit status {probe.returncode}"]
        return PROBE_FAILED.format(detail=detail[0])
    return sandbox


def _system_links() -> list[str]:
    """/bin, /lib... as the host has them: links into /usr recreated, real directories bound read-only."""
    flags = []
    for name in _SYSTEM_LINKS:
        host = Path("/", name)
        if host.is_symlink():
            flags += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            flags += ["--ro-bind", str(host), str(host)]
    return flags


def _unsearchable_parent(root: Path, uid: int) -> Path | None:
    """The first directory above `root`, from / down, that user `uid` (group `uid`) may not enter."""
    for directory in reversed(root.parents):
        info = directory.stat()
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == uid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return directory
    return None
