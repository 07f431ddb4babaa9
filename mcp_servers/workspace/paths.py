"""paths: the one gate between a path a model wrote and a location on disk.

Owns `confine(root, path)`. Every workspace tool, and the sandbox's `cwd`, calls it before touching
the filesystem. Never opens, reads or writes anything.

The rules:
- A relative path is taken from the root. An absolute path is accepted only when it lies inside the
  root, so a path copied from a traceback still works.
- A leading `~` is refused rather than expanded or read as a directory named `~`.
- NUL bytes are refused.
- Every symlink is resolved (`os.path.realpath`) at every call, so a symlink created after startup
  counts as much as one that was there before. The real location must lie inside the real root.
  A symlink that stays inside the root is followed, and the tools act on its target.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

NUL_BYTE = "path {path!r} contains a NUL byte; remove it"
HOME_NOT_EXPANDED = (
    "path {path!r} starts with '~', which is not expanded here; use a path relative to the workspace root"
)
OUTSIDE_ROOT = "path {path!r} is outside the workspace root; use a path relative to the root"
SYMLINK_ESCAPE = (
    "path {path!r} leads through a symlink to outside the workspace root; "
    "use a path whose real location is inside the root"
)


def confine(root: Path, path: str) -> Path:
    """Return the real location of `path` inside `root`, or raise `ToolError` naming the path.

    `root` must itself be a real path (no symlinks), as `Path.resolve()` gives.
    """
    if "\0" in path:
        raise ToolError(NUL_BYTE.format(path=path))
    if path.startswith("~"):
        raise ToolError(HOME_NOT_EXPANDED.format(path=path))
    joined = os.path.join(root, path)
    real = Path(os.path.realpath(joined))
    if real.is_relative_to(root):
        return real
    if Path(os.path.normpath(joined)).is_relative_to(root):
        raise ToolError(SYMLINK_ESCAPE.format(path=path))
    raise ToolError(OUTSIDE_ROOT.format(path=path))
