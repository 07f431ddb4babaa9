"""leftovers: find server processes this test session started and did not reap.

The machine may be shared, so only our own descendants count. The test process makes itself a
child subreaper (prctl PR_SET_CHILD_SUBREAPER): a server whose parent died is re-parented to us
instead of to init, so a leaked daemon stays in our process tree where this check can see it.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

SERVER_MARKERS = ("mcp_servers.", "probe_server.py", "mcp-server-time", "server-everything", "langgraph dev", "langgraph_api")
"""Command-line fragments of every server process the suite starts."""

PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants (Linux ≥ 3.4)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _parents() -> dict[int, tuple[int, str, str]]:
    """pid → (parent pid, state, command line) of every live process we can read."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # it ended while we looked
        table[int(entry.name)] = (int(fields[1]), fields[0], command)
    return table


def server_processes(ancestor: int | None = None) -> list[str]:
    """`pid command` of each live server process below `ancestor` (default: this process)."""
    ancestor = os.getpid() if ancestor is None else ancestor
    table, found = _parents(), []
    for pid, (parent, state, command) in table.items():
        if state == "Z" or pid == ancestor or not any(marker in command for marker in SERVER_MARKERS):
            continue
        seen: set[int] = set()
        while parent not in (0, 1, ancestor) and parent in table and parent not in seen:
            seen.add(parent)
            parent = table[parent][0]
        if parent == ancestor:
            found.append(f"{pid} {command}")
    return found


def wait_for_none(within_s: float = 15.0) -> list[str]:
    """Give servers that are shutting down a moment; return those still alive after it."""
    deadline = time.monotonic() + within_s
    while (alive := server_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive
