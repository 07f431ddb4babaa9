"""Process helpers for the tool tests (Linux /proc and pidfd): is a pid alive, wait for it to
exit without sleeping, and list what this test process has spawned."""

from __future__ import annotations

import os
import select


def is_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie has exited; only its entry is left)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait (on a pidfd, no polling) until `pid` has exited; False if it is still alive after `timeout_s`."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    return not is_alive(pid)


def descendants(root: int | None = None) -> dict[int, str]:
    """Live descendants of `root` (default: this process) → their command line."""
    root = os.getpid() if root is None else root
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    parent[int(entry)] = int(handle.read().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: dict[int, str] = {}
    for pid in parent:
        ancestor = parent.get(pid)
        while ancestor is not None and ancestor != root and ancestor > 1:
            ancestor = parent.get(ancestor)
        if ancestor == root and is_alive(pid):
            found[pid] = _cmdline(pid)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
