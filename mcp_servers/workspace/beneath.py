"""beneath: open files and directories beneath one root directory descriptor, following no symlink.

Owns the race-free half of confinement: every open starts from a descriptor of the root (or of a
directory already opened beneath it) and refuses a symlink at any component, so a directory
swapped for a symlink between a check and an open cannot lead anywhere: there is no check
separate from the open. Never parses paths a model wrote (`paths` does) and never reads content.

Resolution uses `openat2(2)` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
where the kernel has it (Linux 5.6+; syscall 437; Python has no wrapper); elsewhere a walk opens
one component at a time with O_NOFOLLOW from the directory descriptor before it. Both refuse a
symlink with ELOOP. Callers pass names only, never '.', '..' or '/': `paths.parts` makes them.
The one exception, `blocks_dotdot`, walks a path as written to check that its '..' are sound.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every architecture that has it
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_CONFINED = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_PATH = os.O_PATH | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _CONFINED)
    while True:
        size = ctypes.c_size_t(ctypes.sizeof(how))
        fd = _libc.syscall(_SYS_OPENAT2, ctypes.c_int(dir_fd), os.fsencode(path), ctypes.byref(how), size)
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code), path)


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter in front of it) lets openat2 through."""
    root = os.open("/", _PATH | os.O_DIRECTORY)
    try:
        os.close(_openat2(root, ".", _PATH, 0))
    except OSError:
        return False
    finally:
        os.close(root)
    return True


class Beneath:
    """A root directory held open for the life of the server; every open resolves beneath it."""

    def __init__(self, root: Path, *, use_openat2: bool | None = None) -> None:
        self.path = root
        self.fd = os.open(root, _PATH | os.O_DIRECTORY)
        self.uses_openat2 = openat2_available() if use_openat2 is None else use_openat2

    def close(self) -> None:
        os.close(self.fd)

    def open(self, parts: Sequence[str], flags: int, mode: int = 0, *, dir_fd: int | None = None) -> int:
        """A new descriptor for `parts` beneath the root (or beneath `dir_fd`); ELOOP at any symlink.

        An empty `parts` opens the starting directory itself.
        """
        start = self.fd if dir_fd is None else dir_fd
        flags |= os.O_CLOEXEC
        if not parts:
            return os.open(".", flags, dir_fd=start)
        if self.uses_openat2:
            return _openat2(start, "/".join(parts), flags, mode)
        with self.directory(parts[:-1], dir_fd=start) as parent:
            return _open_last(parent, parts[-1], flags, mode)

    def blocks_dotdot(self, written: Sequence[str]) -> str | None:
        """The first name of `written` (a relative path split at '/', '..' included) that a '..'
        would step back over but that is not a directory reached without following a symlink; None
        when there is none. Each '..' returns to the descriptor it came from, so no rename or
        symlink swap can make it lead anywhere else."""
        stack = [os.dup(self.fd)]
        try:
            for name in written:
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(stack) == 1:
                        return name
                    os.close(stack.pop())
                    continue
                try:
                    child = _open_last(stack[-1], name, _PATH | os.O_DIRECTORY, 0)
                except OSError:  # a symlink (ELOOP), a file (ENOTDIR), nothing (ENOENT)
                    return name
                stack.append(child)
            return None
        finally:
            for fd in stack:
                os.close(fd)

    @contextmanager
    def directory(
        self, parts: Sequence[str], *, dir_fd: int | None = None, create: bool = False, made: list[int] | None = None
    ) -> Iterator[int]:
        """A path descriptor of the directory `parts` for `*at` calls; with `create`, missing ones are
        made, and the number of names each made directory has in `parts` is added to `made`."""
        start = self.fd if dir_fd is None else dir_fd
        if create or not self.uses_openat2:
            fd = os.dup(start)
            try:
                for depth, name in enumerate(parts, start=1):
                    fd, new = _step(fd, name, create)
                    if new and made is not None:
                        made.append(depth)
            except BaseException:
                os.close(fd)
                raise
        else:
            fd = _openat2(start, "/".join(parts) or ".", _PATH | os.O_DIRECTORY, 0)
        try:
            yield fd
        finally:
            os.close(fd)


def _step(parent: int, name: str, create: bool) -> tuple[int, bool]:
    """Replace `parent` (closed) by its child directory `name`, made first when `create` and
    missing; with whether this call made it."""
    new = False
    try:
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)  # mkdirat never follows a symlink in the name
                new = True
            except FileExistsError:
                pass
        child = _open_last(parent, name, _PATH, 0)
        if not stat.S_ISDIR(os.fstat(child).st_mode):
            os.close(child)
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name)
        return child, new
    finally:
        os.close(parent)


def _open_last(parent: int, name: str, flags: int, mode: int) -> int:
    """Open one name in `parent` without following it; a symlink is refused with ELOOP."""
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW opens the link itself
        os.close(fd)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    return fd
