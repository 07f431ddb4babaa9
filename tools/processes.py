"""processes: the processes a stdio MCP server leaves on this host, found through Linux's /proc.

Elsewhere these find nothing and the SDK's own reaping applies.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

logger = logging.getLogger(__name__)


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[2])


def proc_pids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def find_child_by_stderr(log_path: Path) -> int | None:
    """Our child whose stderr is this server's log file: how we learn a stdio server's pid
    (the SDK does not expose it), without racing other servers started at the same time."""
    try:
        target = os.stat(log_path)
    except OSError:
        return None
    me = os.getpid()
    for pid in proc_pids():
        stat = proc_stat(pid)
        if stat is None or stat[1] != me or stat[0] == "Z":
            continue
        try:
            fd2 = os.stat(f"/proc/{pid}/fd/2")
        except OSError:
            continue
        if (fd2.st_dev, fd2.st_ino) == (target.st_dev, target.st_ino):
            return pid
    return None


def kill_leftovers(pgid: int) -> None:
    """SIGKILL the server's process group if anything in it is still alive.

    The SDK already closed stdin, waited, and escalated to SIGTERM/SIGKILL on the group; this
    catches what a server that exited gracefully left behind (its own children).
    """
    alive = [pid for pid in proc_pids() if (stat := proc_stat(pid)) is not None and stat[2] == pgid and stat[0] != "Z"]
    if alive:
        logger.warning("MCP server process group %d still has %s after close; killing it", pgid, alive)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
