"""masks: the places under the sandbox root a child must not see, and the bwrap flags that hide them.

Owns turning hidden globs (the `--hide` flags: absolute, symlink-free globs over real paths, `*`
crossing '/', `dir/**` naming `dir` too, as the gateway's path rules read them) into mounts over
what they name under the root, found afresh before every run: a directory gets an empty tmpfs over
it, a file /dev/null. A mask lives in the child's mount namespace, so every way of naming the place
(`..`, an absolute path, a symlink made inside the sandbox, /proc/self/root) reaches the mask, and
a mount point cannot be renamed or removed from inside. Never decides what to hide: the client
starting the server passes the policy's deny globs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

_GLOB_CHARS = "*?["


def bwrap_flags(root: Path, globs: Iterable[str]) -> list[str]:
    """bwrap flags masking every existing directory and file under `root` that a glob names."""
    flags: list[str] = []
    for path, is_dir in sorted(hidden(root, globs)):
        flags += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return flags


def hidden(root: Path, globs: Iterable[str]) -> set[tuple[str, bool]]:
    """(path, is a directory) of each outermost place under `root` that a glob names; symlinks are
    left alone (what they point to is masked where it is named)."""
    found: dict[str, bool] = {}
    for glob in globs:
        base = _fixed_base(glob)
        start = str(root) if _inside(str(root), base) else base
        if not _inside(start, str(root)) or not os.path.lexists(start):
            continue
        if _names(start, glob):
            found[start] = os.path.isdir(start) and not os.path.islink(start)
            continue
        for directory, subdirectories, files in os.walk(start):
            for name in [*subdirectories, *files]:
                path = os.path.join(directory, name)
                if not os.path.islink(path) and _names(path, glob):
                    found[path] = name in subdirectories
            subdirectories[:] = [name for name in subdirectories if os.path.join(directory, name) not in found]
    return {(path, is_dir) for path, is_dir in found.items() if not any(_inside(path, other) and path != other for other in found)}


def _names(path: str, glob: str) -> bool:
    return fnmatchcase(path, glob) or (glob.endswith("/**") and path == glob[:-3])


def _fixed_base(glob: str) -> str:
    """The directory before the glob's first wildcard (the whole glob when it has none)."""
    first = min((glob.find(char) for char in _GLOB_CHARS if char in glob), default=-1)
    if first < 0:
        return glob.rstrip("/") or "/"
    return glob[: glob.rfind("/", 0, first)] or "/"


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
