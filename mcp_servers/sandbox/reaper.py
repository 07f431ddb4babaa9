"""reaper: adopt and reap the sandbox init processes that bwrap leaves behind.

bwrap 0.8, given a PID namespace, exits as soon as it learns its sandbox's exit status, without
waiting for the sandbox's init process (PID 1 inside), which is then re-parented. On a host whose
PID 1 does not reap orphans (many containers) every run would leave a zombie. The server makes
itself a child subreaper, so these processes become its own children, and reaps them after each
run. Only children that live in a nested PID namespace are touched: the bwrap processes the
server started itself (in its own namespace) are waited for by the runner, never here.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
REAP_TIMEOUT_S = 2.0


def adopt_orphans() -> None:
    """Make orphaned descendants of this process its children (Linux ≥ 3.4)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap_adopted(timeout_s: float = REAP_TIMEOUT_S) -> None:
    """Wait for every adopted sandbox init (a child in a nested PID namespace); each is already exiting."""
    deadline = time.monotonic() + timeout_s
    for pid in _adopted():
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:  # reaped meanwhile
                break
            time.sleep(0.01)


def _adopted() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if status.get("PPid", "").strip() == me and len(status.get("NSpid", "").split()) > 1:
            found.append(int(entry.name))
    return found
