"""files: bounded text I/O on locations `paths.confine` has already approved.

Owns reading a whole text file under a size cap, replacing a file atomically, content hashes, and
turning OS errors into messages the model can act on. Never decides whether a path is allowed.

Opens use O_NOFOLLOW: the location was resolved a moment earlier, so a symlink found in its place
now was swapped in since, and is refused rather than followed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

TOO_LARGE = "file {path!r} is {size} bytes; {tool} handles files up to {limit} bytes; {fix}"
NOT_TEXT = "file {path!r} is not UTF-8 text ({reason}); the workspace tools handle text files only"
OS_ERROR = "path {path!r}: {reason}; {fix}"

_FIXES = {
    errno.ENOENT: "check the name with list_files",
    errno.EISDIR: "pass the path of a file, not a directory",
    errno.ENOTDIR: "a parent in the path is a file; check the path with list_files",
    errno.ELOOP: "the path is a symlink that changed or loops; pass the path of the file itself",
    errno.EACCES: "the server may not access it; choose another path",
    errno.EPERM: "the server may not access it; choose another path",
    errno.ENOTEMPTY: "the destination directory is not empty; choose another destination",
    errno.EINVAL: "a directory cannot be moved into itself; choose another destination",
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


def read_text(location: Path, path: str, *, tool: str, limit_bytes: int, fix: str) -> str:
    """Return the whole UTF-8 text of the file at `location`, refusing files over `limit_bytes`."""
    with os_errors(path):
        fd = os.open(location, os.O_RDONLY | os.O_NOFOLLOW)
        with open(fd, "rb") as file:
            size = os.fstat(fd).st_size
            if size > limit_bytes:
                raise ToolError(TOO_LARGE.format(path=path, size=size, tool=tool, limit=limit_bytes, fix=fix))
            data = file.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(NOT_TEXT.format(path=path, reason=exc.reason + f" at byte {exc.start}")) from exc


def read_existing(location: Path, path: str, *, tool: str, limit_bytes: int) -> str | None:
    """Like `read_text`, but None when nothing exists at `location` (a write is about to create it)."""
    if not os.path.lexists(location):
        return None
    return read_text(location, path, tool=tool, limit_bytes=limit_bytes, fix="its content could not be kept for undo")


def replace_text(location: Path, path: str, content: str) -> None:
    """Make `location` hold `content`: parents created, old mode kept, replaced atomically."""
    with os_errors(path):
        location.parent.mkdir(parents=True, exist_ok=True)
        mode = os.stat(location).st_mode & 0o7777 if location.exists() else None
        fd, temporary = tempfile.mkstemp(dir=location.parent, prefix=f".{location.name}.", suffix=".tmp")
        try:
            with open(fd, "w", encoding="utf-8", newline="") as file:
                file.write(content)
            if mode is not None:
                os.chmod(temporary, mode)
            os.replace(temporary, location)
        except BaseException:
            os.unlink(temporary)
            raise
