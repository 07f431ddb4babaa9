"""server: the workspace MCP server, text files confined to one root directory.

Owns the tool surface (names, titles, descriptions, parameters, annotations, limits) and the order
of steps inside each tool. Never resolves a path itself (`paths.confine` does, for every path of
every call) and never does raw file I/O (`files` does).

No `from __future__ import annotations` here: the SDK reads each tool's annotations at
registration, and some of them name values local to `build_server`.
"""

import os
from collections.abc import Iterator
from fnmatch import fnmatch
from itertools import islice
from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_servers.workspace.files import os_errors, read_existing, read_text, replace_text, sha256
from mcp_servers.workspace.journal import Journal, default_directory
from mcp_servers.workspace.models import (
    Deleted,
    Edited,
    Entry,
    FileText,
    Listing,
    Match,
    Moved,
    SearchResult,
    Written,
)
from mcp_servers.workspace.paths import confine

DEFAULT_MAX_READ_CHARS = 100_000
DEFAULT_MAX_WRITE_BYTES = 1_000_000
READ_FILE_LIMIT_BYTES = 10_000_000
LIST_LIMIT = 1_000
SEARCH_FILE_LIMIT = 5_000
SEARCH_FILE_BYTES = 1_000_000
SEARCH_LINE_CHARS = 200

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
OVERWRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
REMOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

NOT_A_DIRECTORY = "path {path!r} is a file, not a directory; pass a directory, or use read_file"
CONTENT_TOO_LARGE = "content is {size} bytes; {tool} writes at most {limit} bytes; split it into several files"
EMPTY_ARGUMENT = "{name} is empty; pass the exact text to {purpose}"
OFFSET_PAST_END = "offset {offset} is past the end of {path!r} ({total} chars); pass an offset of at most {total}"
OLD_NOT_FOUND = (
    "old text not found in {path!r}; read_file it and copy the exact text, including whitespace and indentation"
)
OLD_NOT_UNIQUE = (
    "old text occurs more than once in {path!r} (lines {first} and {second}); "
    "include more surrounding text so it matches exactly once"
)
KEY_REUSED = (
    "idempotency_key {key!r} was already used to write other content to {path!r}; use a new key for a different write"
)
DESTINATION_EXISTS = "destination {path!r} already exists; delete it first or choose another destination"
ROOT_NOT_MOVABLE = "path {path!r} is the workspace root itself; move a file or directory inside it"

AS_PATH = {"x-boundloop-resource": "path"}
"""Marks an argument as a path in the input schema, so the gateway's path rules see it resolved."""
PathArg = Annotated[
    str, Field(description="Path relative to the workspace root, e.g. 'src/app.py'.", json_schema_extra=AS_PATH)
]


def build_server(
    root: Path,
    *,
    max_read_chars: int = DEFAULT_MAX_READ_CHARS,
    max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
    journal_dir: Path | None = None,
) -> MCPServer:
    """A workspace server over `root` (created if missing). Keyed writes are journaled in `journal_dir`."""
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    journal = Journal(journal_dir or default_directory(root))
    mcp = MCPServer(
        "boundloop-workspace",
        instructions=(
            "Text files under one workspace root. Paths are relative to the root; paths that lead "
            "outside it ('..', '~', absolute paths elsewhere, symlinks out) are refused. "
            "Writes return what they replaced, so they can be undone."
        ),
    )

    def relative(location: Path) -> str:
        return location.relative_to(root).as_posix()

    @mcp.tool(title="List files", annotations=READ_ONLY)
    def list_files(
        path: Annotated[
            str, Field(description="Directory relative to the workspace root.", json_schema_extra=AS_PATH)
        ] = ".",
        pattern: Annotated[str, Field(description="Shell-style pattern each entry's name must match.")] = "*",
        recursive: Annotated[bool, Field(description="Also list the contents of subdirectories.")] = False,
    ) -> Listing:
        """List the files and directories in a workspace directory, sorted by name.

        Symlinks are listed as such and never followed. Returns at most 1000 entries; `truncated`
        says when there were more (narrow `path` or `pattern`).
        """
        directory = confine(root, path)
        with os_errors(path):
            if directory.is_file():
                raise ToolError(NOT_A_DIRECTORY.format(path=path))
            found = (e for e in _walk(directory, recursive) if fnmatch(e.name, pattern))
            entries = [_entry(e, relative(Path(e.path))) for e in islice(found, LIST_LIMIT + 1)]
        return Listing(entries=entries[:LIST_LIMIT], truncated=len(entries) > LIST_LIMIT)

    @mcp.tool(title="Read a file", annotations=READ_ONLY)
    def read_file(
        path: PathArg,
        max_chars: Annotated[
            int | None,
            Field(ge=1, description=f"Characters to return; default and cap {max_read_chars}."),
        ] = None,
        offset: Annotated[int, Field(ge=0, description="Character offset to start from, to read on.")] = 0,
    ) -> FileText:
        """Read a UTF-8 text file from the workspace.

        Returns at most `max_chars` characters (capped by the server) starting at `offset`;
        `next_offset` says where to continue. Files over 10 MB and non-text files are refused.
        """
        location = confine(root, path)
        text = read_text(
            location,
            path,
            tool="read_file",
            limit_bytes=READ_FILE_LIMIT_BYTES,
            fix="use search to find the lines you need",
        )
        if offset > len(text):
            raise ToolError(OFFSET_PAST_END.format(offset=offset, path=path, total=len(text)))
        content = text[offset : offset + min(max_chars or max_read_chars, max_read_chars)]
        end = offset + len(content)
        return FileText(
            path=relative(location),
            content=content,
            offset=offset,
            total_chars=len(text),
            next_offset=end if end < len(text) else None,
        )

    @mcp.tool(title="Search file contents", annotations=READ_ONLY)
    def search(
        query: Annotated[str, Field(description="Literal text to find (case-sensitive, not a regex).")],
        path: Annotated[
            str, Field(description="File or directory to search, relative to the root.", json_schema_extra=AS_PATH)
        ] = ".",
        glob: Annotated[str, Field(description="Shell-style pattern file names must match, e.g. '*.py'.")] = "*",
        max_results: Annotated[int, Field(ge=1, le=200, description="Matching lines to return.")] = 50,
    ) -> SearchResult:
        """Find lines containing a literal text in the workspace's text files, recursively.

        Skips symlinks, binary files and files over 1 MB; scans at most 5000 files. Each line is
        cut to 200 characters around the match. `truncated` says the search stopped early.
        """
        if not query:
            raise ToolError(EMPTY_ARGUMENT.format(name="query", purpose="find"))
        location = confine(root, path)
        with os_errors(path):
            if location.is_file():
                files = [location]
            else:
                candidates = (
                    Path(e.path)
                    for e in _walk(location, recursive=True)
                    if e.is_file(follow_symlinks=False) and fnmatch(e.name, glob)
                )
                files = list(islice(candidates, SEARCH_FILE_LIMIT + 1))
        truncated = len(files) > SEARCH_FILE_LIMIT
        matches: list[Match] = []
        scanned = 0
        for candidate in files[:SEARCH_FILE_LIMIT]:
            scanned += 1
            matches.extend(
                Match(path=relative(candidate), line_number=number, line=_excerpt(line, query))
                for number, line in _lines_of_text(candidate)
                if query in line
            )
            if len(matches) > max_results:
                truncated = True
                break
        return SearchResult(matches=matches[:max_results], files_scanned=scanned, truncated=truncated)

    @mcp.tool(title="Write a file", annotations=OVERWRITES)
    def write_file(
        path: PathArg,
        content: Annotated[str, Field(description="The whole new content of the file.")],
        idempotency_key: Annotated[
            str | None,
            Field(description="Names this write: a repeat with the same key returns the first result."),
        ] = None,
    ) -> Written:
        """Create or replace a text file in the workspace with `content` (parent directories are created).

        Returns the previous content (null if the file is new), so the write can be undone.
        Content over the server's size limit (1 MB by default) is refused, and so is replacing a
        file whose old content cannot be kept (binary or over the limit). With `idempotency_key`,
        a repeat (even after a server crash) returns the first result and writes nothing new.
        """
        location = confine(root, path)
        size = len(content.encode())
        if size > max_write_bytes:
            raise ToolError(CONTENT_TOO_LARGE.format(size=size, tool="write_file", limit=max_write_bytes))

        def describe() -> Written:
            previous = read_existing(location, path, tool="write_file", limit_bytes=max_write_bytes)
            return Written(
                path=relative(location),
                sha256=sha256(content),
                size_bytes=size,
                created=previous is None,
                previous_sha256=None if previous is None else sha256(previous),
                previous_content=previous,
            )

        if idempotency_key is None:
            written = describe()
            replace_text(location, path, content)
            return written
        # The promise is journaled before the write and marked done after it: a crash in between
        # leaves a promise that the replay keeps, with the content that was there first.
        entry = journal.get(idempotency_key)
        if entry is None:
            entry = {"written": describe().model_dump(), "done": False}
            journal.put(idempotency_key, entry)
        written = Written.model_validate(entry["written"])
        if (written.path, written.sha256) != (relative(location), sha256(content)):
            raise ToolError(KEY_REUSED.format(key=idempotency_key, path=written.path))
        if not entry["done"]:
            replace_text(location, path, content)
            journal.put(idempotency_key, {**entry, "done": True})
        return written

    @mcp.tool(title="Edit a file", annotations=CHANGES)
    def edit_file(
        path: PathArg,
        old: Annotated[str, Field(description="Exact text to replace; must occur exactly once in the file.")],
        new: Annotated[str, Field(description="Text to put in its place.")],
    ) -> Edited:
        """Replace one exact, unique occurrence of `old` with `new` in a workspace text file.

        Fails, changing nothing, when `old` is missing or occurs more than once. Returns the whole
        previous content, so the edit can be undone with write_file.
        """
        if not old:
            raise ToolError(EMPTY_ARGUMENT.format(name="old", purpose="replace"))
        location = confine(root, path)
        text = read_text(location, path, tool="edit_file", limit_bytes=max_write_bytes, fix="it is too large to edit")
        first = text.find(old)
        if first < 0:
            raise ToolError(OLD_NOT_FOUND.format(path=path))
        second = text.find(old, first + 1)
        if second >= 0:
            raise ToolError(
                OLD_NOT_UNIQUE.format(path=path, first=_line_at(text, first), second=_line_at(text, second))
            )
        updated = text[:first] + new + text[first + len(old) :]
        size = len(updated.encode())
        if size > max_write_bytes:
            raise ToolError(CONTENT_TOO_LARGE.format(size=size, tool="edit_file", limit=max_write_bytes))
        replace_text(location, path, updated)
        return Edited(
            path=relative(location),
            sha256=sha256(updated),
            previous_sha256=sha256(text),
            previous_content=text,
        )

    @mcp.tool(title="Move a file", annotations=CHANGES)
    def move_file(
        source: Annotated[
            str, Field(description="File or directory to move, relative to the root.", json_schema_extra=AS_PATH)
        ],
        destination: Annotated[
            str, Field(description="New path relative to the root; must not exist yet.", json_schema_extra=AS_PATH)
        ],
    ) -> Moved:
        """Move or rename a file or directory inside the workspace (parent directories are created).

        Never overwrites: an existing destination is refused. Undo by moving it back.
        """
        origin = confine(root, source)
        target = confine(root, destination)
        if origin == root:
            raise ToolError(ROOT_NOT_MOVABLE.format(path=source))
        with os_errors(source):
            os.lstat(origin)
        if os.path.lexists(target):
            raise ToolError(DESTINATION_EXISTS.format(path=destination))
        with os_errors(destination):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(origin, target)
        return Moved(source=relative(origin), destination=relative(target))

    @mcp.tool(title="Delete a file", annotations=REMOVES)
    def delete_file(path: PathArg) -> Deleted:
        """Delete one text file from the workspace and return its content, so it can be restored.

        Directories, binary files and files over the write limit are refused (their content could
        not be returned for undo).
        """
        location = confine(root, path)
        content = read_text(
            location,
            path,
            tool="delete_file",
            limit_bytes=max_write_bytes,
            fix="its content could not be returned for undo, so it is kept",
        )
        with os_errors(path):
            os.unlink(location)
        return Deleted(path=relative(location), sha256=sha256(content), deleted_content=content)

    return mcp


def _walk(directory: Path, recursive: bool) -> Iterator[os.DirEntry[str]]:
    """Entries of `directory` sorted by name, depth first; symlinked directories are not entered."""
    with os.scandir(directory) as scan:
        children = sorted(scan, key=lambda entry: entry.name)
    for child in children:
        yield child
        if recursive and child.is_dir(follow_symlinks=False):
            yield from _walk(Path(child.path), recursive)


def _entry(entry: os.DirEntry[str], path: str) -> Entry:
    if entry.is_symlink():
        return Entry(path=path, kind="symlink", size_bytes=None)
    if entry.is_dir():
        return Entry(path=path, kind="directory", size_bytes=None)
    return Entry(path=path, kind="file", size_bytes=entry.stat().st_size)


def _lines_of_text(location: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of a small UTF-8 file; nothing for large, binary or unreadable files."""
    try:
        if location.stat().st_size > SEARCH_FILE_BYTES:
            return
        text = location.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return
    yield from enumerate(text.splitlines(), start=1)


def _excerpt(line: str, query: str) -> str:
    """At most SEARCH_LINE_CHARS of `line`, starting a little before the first match."""
    start = max(0, min(line.find(query) - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
    return line[start : start + SEARCH_LINE_CHARS]


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1
