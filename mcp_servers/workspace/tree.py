"""tree: depth-first walks of a directory opened beneath the workspace root.

Owns listing a directory by descriptor, sorted by name, and descending into subdirectories by
opening each one with `beneath` from its parent's descriptor, so a subdirectory swapped for a
symlink mid-walk is skipped, never entered. Never reads file content.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from boundloop.mcp_servers.workspace.beneath import Beneath

Kind = Literal["file", "directory", "symlink", "other"]


@dataclass(frozen=True)
class Found:
    path: str
    """Relative to the workspace root."""
    name: str
    dir_fd: int
    """The directory holding it; open only until the walk moves on."""
    kind: Kind
    size_bytes: int | None
    """Size of a regular file; None for everything else."""


def walk(beneath: Beneath, dir_fd: int, prefix: str, *, recursive: bool) -> Iterator[Found]:
    """Entries of the directory `dir_fd` (opened for reading) named `prefix`, sorted by name, depth first.

    Close the iterator (`contextlib.closing`) when stopping early, so the open subdirectories are closed.
    """
    with os.scandir(dir_fd) as scan:
        children = sorted(scan, key=lambda entry: entry.name)
    for child in children:
        try:
            info = child.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed since the listing
            continue
        kind = _kind(info.st_mode)
        size = info.st_size if kind == "file" else None
        yield Found(path=prefix + child.name, name=child.name, dir_fd=dir_fd, kind=kind, size_bytes=size)
        if recursive and kind == "directory":
            try:
                sub = beneath.open([child.name], os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
            except OSError:  # replaced (by a symlink, say) or removed since the listing: not entered
                continue
            try:
                yield from walk(beneath, sub, f"{prefix}{child.name}/", recursive=True)
            finally:
                os.close(sub)


def _kind(mode: int) -> Kind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    return "other"
