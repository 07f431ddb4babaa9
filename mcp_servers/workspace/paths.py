"""paths: the one reading of a path a model wrote, as names beneath the workspace root.

Owns `parts(beneath, path)`. Every workspace tool, and the sandbox's `cwd`, calls it first.
Whether a name is a symlink is decided when it is opened (`beneath`), in the same system call, so
no check can go stale before the open it guards.

The rules:
- A relative path is taken from the root. An absolute path is accepted only when it lies inside the
  root, so a path copied from a traceback still works.
- A leading `~` is refused rather than expanded or read as a directory named `~`.
- NUL bytes are refused.
- '.' and '..' are resolved by name: a path whose '..' climbs above the root is refused.
- A path is acted on only where its lexical reading (by name) and its physical one (the kernel's,
  following each name) agree, so every reader of a path — the gateway's policy resolves it
  physically, like `realpath` — sees the same target. They can only differ at a '..' that follows
  a symlink (`link/..` is the parent of the link's *target*) or a name that is not there. So every
  name before a '..' must be a directory, reached from the root without following a symlink;
  otherwise the path is refused. Each '..' then steps back to the very directory it came from.
- Symlinks are never followed, at any component, even when they point inside the root: a tool
  given a path through a symlink fails with ELOOP (see `files`).
- A trailing slash is dropped ('src/' is 'src').
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from boundloop.mcp_servers.workspace.beneath import Beneath

NUL_BYTE = "path {path!r} contains a NUL byte; remove it"
HOME_NOT_EXPANDED = (
    "path {path!r} starts with '~', which is not expanded here; use a path relative to the workspace root"
)
OUTSIDE_ROOT = "path {path!r} is outside the workspace root; use a path relative to the root"
DOTDOT_AFTER_LINK = (
    "path {path!r} has '..' after {name!r}, which is not a plain directory here (a symlink, a file or "
    "nothing), so the path does not lead where its text says; write the path without '..'"
)


def parts(beneath: Beneath, path: str) -> tuple[str, ...]:
    """The names leading from the root to `path`, or raise `ToolError` naming the path.

    `beneath.path` must itself be a real path (no symlinks), as `Path.resolve()` gives. An empty
    tuple is the root. Touches the filesystem only when the path holds '..'.
    """
    root = beneath.path
    if "\0" in path:
        raise ToolError(NUL_BYTE.format(path=path))
    if path.startswith("~"):
        raise ToolError(HOME_NOT_EXPANDED.format(path=path))
    # relpath normalises both sides, so '..' in an absolute path is resolved before the comparison.
    relative = posixpath.relpath(path, root) if path.startswith("/") else posixpath.normpath(path)
    if relative.startswith("/") or relative == ".." or relative.startswith("../"):
        raise ToolError(OUTSIDE_ROOT.format(path=path))
    names = () if relative == "." else tuple(relative.split("/"))
    _check_dotdot(beneath, path, root)
    return names


def _check_dotdot(beneath: Beneath, path: str, root: Path) -> None:
    """Refuse `path` when a '..' in it follows anything but a plain directory (see the module docstring)."""
    written = path.split("/")
    if ".." not in written:
        return
    if path.startswith("/"):
        prefix = str(root).split("/")
        if written[: len(prefix)] != prefix:  # an absolute path that reaches the root only through '..'
            raise ToolError(OUTSIDE_ROOT.format(path=path))
        written = written[len(prefix) :]
    last = len(written) - 1 - written[::-1].index("..")
    blocker = beneath.blocks_dotdot(written[:last + 1])
    if blocker is not None:
        raise ToolError(DOTDOT_AFTER_LINK.format(path=path, name=blocker))
