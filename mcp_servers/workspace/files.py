"""files: bounded text I/O on files opened beneath the workspace root, refusing anything but plain files.

Owns reading a whole text file under a size cap, replacing a file atomically, deleting one with its
content kept, content hashes, and turning OS errors into messages the model can act on. Every open
goes through `beneath`, so no symlink is followed; every content read or write of an existing file
first checks, on the open descriptor, that it is a regular file (a FIFO or a device would hang the
call or never end) with one link (a hard link may be a file outside the root under a second name),
unless hard links are allowed. Never decides whether a path is allowed (`paths` reads it).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from boundloop.mcp_servers.workspace.beneath import Beneath

TOO_LARGE = "file {path!r} is {size} bytes; {tool} handles files up to {limit} bytes; {fix}"
NOT_TEXT = "file {path!r} is not UTF-8 text ({reason}); the workspace tools handle text files only"
NOT_REGULAR = (
    "path {path!r} is a {kind}, not a regular file; the workspace tools handle text files and directories only"
)
HARD_LINKED = (
    "file {path!r} has {links} hard links, so its content may belong to a file outside the workspace; "
    "it is refused (the server's --allow-hard-links accepts such files)"
)
CHANGED = "file {path!r} was replaced while it was being deleted; nothing was deleted, try again"
ROOT_ITSELF = "path {path!r} is the workspace root itself; pass the path of a file inside it"
OS_ERROR = "path {path!r}: {reason}; {fix}"

_FIXES = {
    errno.ENOENT: "check the name with list_files",
    errno.EISDIR: "pass the path of a file, not a directory",
    errno.ENOTDIR: "a parent in the path is a file; check the path with list_files",
    errno.ELOOP: "symlinks are never followed here; pass the path of the file itself (list_files shows links)",
    errno.ENXIO: "it is not a regular file; the workspace tools handle text files only",
    errno.ENAMETOOLONG: "a name in it, or the whole path, is too long; use a shorter path",
    errno.EACCES: "the server may not access it; choose another path",
    errno.EPERM: "the server may not access it; choose another path",
    errno.ENOTEMPTY: "the destination directory is not empty; choose another destination",
    errno.EINVAL: "a directory cannot be moved into itself; choose another destination",
}
_KINDS = {
    stat.S_IFIFO: "FIFO (named pipe)",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
    stat.S_IFLNK: "symlink",
}


@contextmanager
def os_errors(path: str) -> Iterator[None]:
    """Re-raise an `OSError` from the block as a `ToolError` naming `path` as the model wrote it."""
    try:
        yield
    except OSError as exc:
        fix = _FIXES.get(exc.errno or 0, "check the path with list_files")
        raise ToolError(OS_ERROR.format(path=path, reason=exc.strerror or exc, fix=fix)) from exc


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def split(parts: Sequence[str], path: str) -> tuple[Sequence[str], str]:
    """The parent's names and the last name of `parts`; the root itself has no name to act on."""
    if not parts:
        raise ToolError(ROOT_ITSELF.format(path=path))
    return parts[:-1], parts[-1]


class Files:
    def __init__(self, beneath: Beneath, *, allow_hard_links: bool) -> None:
        self._beneath = beneath
        self._allow_hard_links = allow_hard_links

    def open_regular(self, parts: Sequence[str], path: str, *, dir_fd: int | None = None) -> int:
        """A blocking read descriptor of the plain file at `parts`, or `ToolError`/`OSError` saying why not."""
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
        fd = self._beneath.open(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
            if not stat.S_ISREG(info.st_mode):
                kind = _KINDS.get(stat.S_IFMT(info.st_mode), "special file")
                raise ToolError(NOT_REGULAR.format(path=path, kind=kind))
            if info.st_nlink > 1 and not self._allow_hard_links:
                raise ToolError(HARD_LINKED.format(path=path, links=info.st_nlink))
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_text(self, parts: Sequence[str], path: str, *, tool: str, limit_bytes: int, fix: str) -> str:
        """The whole UTF-8 text of the file at `parts`, refusing files over `limit_bytes`."""
        with os_errors(path):
            fd = self.open_regular(parts, path)
        return _read(fd, path, tool=tool, limit_bytes=limit_bytes, fix=fix)

    def read_existing(self, parts: Sequence[str], path: str, *, tool: str, limit_bytes: int) -> str | None:
        """Like `read_text`, but None when nothing exists at `parts` (a write is about to create it)."""
        with os_errors(path):
            try:
                fd = self.open_regular(parts, path)
            except FileNotFoundError:
                return None
        return _read(fd, path, tool=tool, limit_bytes=limit_bytes, fix="its content could not be kept for undo")

    def replace_text(self, parts: Sequence[str], path: str, content: str) -> list[str]:
        """Make the file at `parts` hold `content`: parents created, old mode kept, replaced atomically.
        Returns the parent directories it made, root-relative, outermost first.

        The new content goes to a fresh file renamed over the old name, so a hard link's other
        names keep the old content.
        """
        directory, name = split(parts, path)
        made: list[int] = []
        with os_errors(path), self._beneath.directory(directory, create=True, made=made) as parent:
            try:
                mode: int | None = stat.S_IMODE(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except FileNotFoundError:
                mode = None
            temporary = f".boundloop-{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temporary, flags, 0o666, dir_fd=parent)
            try:
                with open(fd, "w", encoding="utf-8", newline="") as file:
                    file.write(content)
                    if mode is not None:
                        os.fchmod(fd, mode)
                os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                os.unlink(temporary, dir_fd=parent)
                raise
        return ["/".join(directory[:depth]) for depth in made]

    def prune(self, directories: Sequence[Sequence[str]]) -> list[str]:
        """Remove each directory that is empty, deepest first; return the ones removed, root-relative.
        One that holds anything, or is not a directory, stays."""
        removed = []
        for names in sorted(directories, key=len, reverse=True):
            if not names:
                continue
            try:
                with self._beneath.directory(names[:-1]) as parent:
                    os.rmdir(names[-1], dir_fd=parent)  # rmdirat refuses a symlink and a non-empty directory
            except OSError:
                continue
            removed.append("/".join(names))
        return removed

    def delete_text(self, parts: Sequence[str], path: str, *, limit_bytes: int, fix: str) -> str:
        """Remove the file at `parts` and return its whole text; the name must still be the file read."""
        directory, name = split(parts, path)
        with os_errors(path), self._beneath.directory(directory) as parent:
            fd = self.open_regular([name], path, dir_fd=parent)
            read = os.fstat(fd)
            content = _read(fd, path, tool="delete_file", limit_bytes=limit_bytes, fix=fix)
            now = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (read.st_dev, read.st_ino):
                raise ToolError(CHANGED.format(path=path))
            os.unlink(name, dir_fd=parent)
        return content

    def lines(self, name: str, dir_fd: int, *, limit_bytes: int) -> Iterator[tuple[int, str]]:
        """Numbered lines of a small UTF-8 plain file; nothing for large, binary, linked or special files."""
        try:
            fd = self.open_regular([name], name, dir_fd=dir_fd)
            text = _read(fd, name, tool="search", limit_bytes=limit_bytes, fix="")
        except (OSError, ToolError):
            return
        yield from enumerate(text.splitlines(), start=1)


def _read(fd: int, path: str, *, tool: str, limit_bytes: int, fix: str) -> str:
    """Read all of `fd` (closed afterwards) as UTF-8, refusing more than `limit_bytes`."""
    with os_errors(path), open(fd, "rb") as file:
        size = os.fstat(fd).st_size
        if size > limit_bytes:
            raise ToolError(TOO_LARGE.format(path=path, size=size, tool=tool, limit=limit_bytes, fix=fix))
        data = file.read(limit_bytes + 1)  # a file growing while read still stops at the limit
    if len(data) > limit_bytes:
        raise ToolError(TOO_LARGE.format(path=path, size=len(data), tool=tool, limit=limit_bytes, fix=fix))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(NOT_TEXT.format(path=path, reason=exc.reason + f" at byte {exc.start}")) from exc
