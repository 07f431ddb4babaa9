"""sandboxes: what sandbox tests need around a real sandbox server.

`searchable_root` makes a root the sandbox user can reach (pytest's own temp dirs live under a
0700 directory when run as root); `processes_with` and `all_gone` look for a snippet's processes
on the host by a token in their command line, since PIDs inside the sandbox are not host PIDs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GONE_TIMEOUT_S = 15.0


@contextmanager
def searchable_root() -> Iterator[Path]:
    """A fresh `root` directory inside a world-searchable temp dir; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="boundloop-sandbox-"))
    base.chmod(0o755)
    (base / "root").mkdir()
    try:
        yield base / "root"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def token() -> str:
    return f"boundloop-{uuid.uuid4().hex}"


def sleeper(mark: str) -> str:
    """Python source of a program that sleeps ten minutes and carries `mark` in its command line."""
    return f"import time; time.sleep(600)  # {mark}"


def processes_with(mark: str) -> list[int]:
    """Host PIDs whose command line contains `mark` (zombies have none, so they do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def all_gone(mark: str, timeout_s: float = GONE_TIMEOUT_S) -> bool:
    """True once no host process carries `mark`, waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while processes_with(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
