"""swapper: `python tests/security/swapper.py ROOT OUTSIDE` swaps ROOT/d with a symlink to OUTSIDE until killed.

Each round exchanges the names of the real directory `d` and a symlink `d.link -> OUTSIDE` in one
renameat2(RENAME_EXCHANGE) call, so `d` is never missing: half the time it is the directory, half
the time the symlink. Prints one line once swapping has begun; `settle` puts the directory back.
Standard library only, so it starts in milliseconds (tests/security/race.py runs it as a process).
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(root: str) -> None:
    d, link = os.fsencode(os.path.join(root, "d")), os.fsencode(os.path.join(root, "d.link"))
    if _libc.renameat2(_AT_FDCWD, d, _AT_FDCWD, link, _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), "renameat2")


def settle(root: str) -> None:
    """Leave the real directory at `d` and no symlink behind."""
    if stat.S_ISLNK(os.lstat(os.path.join(root, "d")).st_mode):
        exchange(root)
    os.unlink(os.path.join(root, "d.link"))


def main(root: str, outside: str) -> None:
    os.symlink(outside, os.path.join(root, "d.link"))
    exchange(root)
    print("swapping", flush=True)
    while True:
        exchange(root)


if __name__ == "__main__":
    main(*sys.argv[1:])
