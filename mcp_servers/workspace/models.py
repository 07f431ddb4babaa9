"""models: the structured results of the workspace tools (each becomes a tool's output schema).

Owns the shapes only; never touches the filesystem. Paths in results are POSIX paths relative to
the workspace root. Write results carry what they replaced, so a saga can undo them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Result(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class Entry(_Result):
    path: str
    """Relative to the workspace root."""
    kind: Literal["file", "directory", "symlink", "other"]
    """Symlinks are listed, never followed; 'other' is a FIFO, device or socket, which the tools refuse."""
    size_bytes: int | None
    """Size of a regular file; null for everything else."""


class Listing(_Result):
    entries: list[Entry]
    """Depth first; each directory's entries sorted by name."""
    truncated: bool
    """True when more entries matched than one listing returns."""


class FileText(_Result):
    path: str
    content: str
    """The text from `offset`, at most `max_chars` characters."""
    offset: int
    """Character offset of `content` in the file."""
    total_chars: int
    """Length of the whole file in characters."""
    next_offset: int | None
    """Pass as `offset` to read on; null when `content` reaches the end of the file."""


class Match(_Result):
    path: str
    line_number: int
    """1-based."""
    line: str
    """The matching line, cut to a bounded length."""


class SearchResult(_Result):
    matches: list[Match]
    files_scanned: int
    truncated: bool
    """True when the search stopped at its result or file limit before scanning everything."""


class Written(_Result):
    path: str
    sha256: str
    """Hash of the content now in the file."""
    size_bytes: int
    created: bool
    """True when the file did not exist before."""
    previous_sha256: str | None
    """Hash of the replaced content; null when the file is new."""
    previous_content: str | None
    """The replaced content, to restore with write_file; null when the file is new (undo with delete_file)."""
    created_directories: list[str] = []
    """Parent directories this write made for the file, outermost first (undo: delete_file's `prune`)."""


class Edited(_Result):
    path: str
    sha256: str
    previous_sha256: str
    previous_content: str
    """The whole file before the edit, to restore with write_file."""


class Moved(_Result):
    source: str
    destination: str
    """Undo by moving `destination` back to `source`."""
    created_directories: list[str] = []
    """Parent directories this move made for the destination, outermost first (undo: move_file's `prune`)."""


class Deleted(_Result):
    path: str
    sha256: str
    """Hash of the deleted content."""
    deleted_content: str
    """The whole deleted file, to restore with write_file."""
    pruned_directories: list[str] = []
    """The directories of `prune` that were empty and are gone."""
