"""paths: the one reading of a path a model wrote, as names beneath the workspace root.

Owns `parts(root, path)`. Every workspace tool, and the sandbox's `cwd`, calls it first. Never
touches the filesystem: whether a name is a symlink is decided when it is opened (`beneath`),
in the same system call, so no check can go stale before the open it guards.

The rules:
- A relative path is taken from the root. An absolute path is accepted only when it lies inside the
  root, so a path copied from a traceback still works.
- A leading `~` is refused rather than expanded or read as a directory named `~`.
- NUL bytes are refused.
- '.' and '..' are resolved by name: a path whose '..' climbs above the root is refused. This is
  sound because no symlink is ever followed, so a name's parent is the directory before it.
- Symlinks are never followed, at any component, even when they point inside the root: a tool
  given a path through a symlink fails with ELOOP (see `files`).
- A trailing slash is dropped ('src/' is 'src').
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

NUL_BYTE = "path {path!r} contains a NUL byte; remove it"
HOME_NOT_EXPANDED = (
    "path {path!r} starts with '~', which is not expanded here; use a path relative to the workspace root"
)
OUTSIDE_ROOT = "path {path!r} is outside the workspace root; use a path relative to the root"


def parts(root: Path, path: str) -> tuple[str, ...]:
    """The names leading from `root` to `path`, or raise `ToolError` naming the path.

    `root` must itself be a real path (no symlinks), as `Path.resolve()` gives. An empty tuple is the root.
    """
    if "\0" in path:
        raise ToolError(NUL_BYTE.format(path=path))
    if path.startswith("~"):
        raise ToolError(HOME_NOT_EXPANDED.format(path=path))
    # relpath normalises both sides, so '..' in an absolute path is resolved before the comparison.
    relative = posixpath.relpath(path, root) if path.startswith("/") else posixpath.normpath(path)
    if relative.startswith("/") or relative == ".." or relative.startswith("../"):
        raise ToolError(OUTSIDE_ROOT.format(path=path))
    return () if relative == "." else tuple(relative.split("/"))
