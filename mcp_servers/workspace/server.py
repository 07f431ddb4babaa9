"""server: the workspace MCP server, text files confined to one root directory.

Owns the tool surface (names, titles, descriptions, parameters, annotations, limits) and the order
of steps inside each tool. Never reads a path itself (`paths.parts` does, for every path of every
call) and never opens anything but through `beneath`, which follows no symlink.

No `from __future__ import annotations` here: the SDK reads each tool's annotations at
registration, and some of them name values local to `build_server`.
"""

import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from fnmatch import fnmatch
from itertools import islice
from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from boundloop.mcp_servers._shipped import ShippedServer
from boundloop.mcp_servers.workspace.beneath import Beneath
from boundloop.mcp_servers.workspace.files import Files, os_errors, sha256
from boundloop.mcp_servers.workspace.journal import Journal, default_directory
from boundloop.mcp_servers.workspace.models import (
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
from boundloop.mcp_servers.workspace.paths import parts
from boundloop.mcp_servers.workspace.tree import walk

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
PruneArg = Annotated[
    list[str],
    Field(
        description="Directories to remove afterwards where they are empty (undoing what a write or move made).",
        json_schema_extra=AS_PATH,
    ),
]


def build_server(
    root: Path,
    *,
    max_read_chars: int = DEFAULT_MAX_READ_CHARS,
    max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
    journal_dir: Path | None = None,
    allow_hard_links: bool = False,
) -> MCPServer:
    """A workspace server over `root` (created if missing). Keyed writes are journaled in `journal_dir`.

    Files with more than one hard link are refused for content reads and writes unless `allow_hard_links`.
    """
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    beneath = Beneath(root)
    files = Files(beneath, allow_hard_links=allow_hard_links)
    journal = Journal(journal_dir or default_directory(root))
    mcp = ShippedServer(
        "boundloop-workspace",
        instructions=(
            "Text files under one workspace root. Paths are relative to the root; paths that lead "
            "outside it ('..', '~', absolute paths elsewhere) are refused, and symlinks are never followed. "
            "Writes return what they replaced, so they can be undone."
        ),
    )

    def mode_of(names: Sequence[str], path: str) -> int:
        """The file type and mode of `names`, itself not followed if it is a symlink."""
        with os_errors(path):
            handle = beneath.open(names, os.O_PATH)
            try:
                return os.fstat(handle).st_mode
            finally:
                os.close(handle)

    @contextmanager
    def directory_to_read(names: Sequence[str], path: str) -> Iterator[int]:
        """A read descriptor of the directory `names`; NOT_A_DIRECTORY for anything else."""
        if not stat.S_ISDIR(mode_of(names, path)):
            raise ToolError(NOT_A_DIRECTORY.format(path=path))
        with os_errors(path):
            fd = beneath.open(names, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield fd
        finally:
            os.close(fd)

    @mcp.tool(title="List files", annotations=READ_ONLY)
    def list_files(
        path: Annotated[
            str, Field(description="Directory relative to the workspace root.", json_schema_extra=AS_PATH)
        ] = ".",
        pattern: Annotated[str, Field(description="Shell-style pattern each entry's name must match.")] = "*",
        recursive: Annotated[bool, Field(description="Also list the contents of subdirectories.")] = False,
    ) -> Listing:
        """List the files and directories in a workspace directory, sorted by name.

        Symlinks are listed as such and never followed; FIFOs, devices and sockets are listed as
        'other'. Returns at most 1000 entries; `truncated` says when there were more (narrow `path`
        or `pattern`).
        """
        names = parts(beneath, path)
        with (
            directory_to_read(names, path) as fd,
            closing(walk(beneath, fd, _prefix(names), recursive=recursive)) as found,
        ):
            entries = [
                Entry(path=f.path, kind=f.kind, size_bytes=f.size_bytes)
                for f in islice((f for f in found if fnmatch(f.name, pattern)), LIST_LIMIT + 1)
            ]
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
        `next_offset` says where to continue. Files over 10 MB, non-text files, symlinks and
        special files are refused.
        """
        names = parts(beneath, path)
        text = files.read_text(
            names,
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
            path="/".join(names),
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

        Skips symlinks, special files, binary files and files over 1 MB; scans at most 5000 files.
        Each line is cut to 200 characters around the match. `truncated` says the search stopped early.
        """
        if not query:
            raise ToolError(EMPTY_ARGUMENT.format(name="query", purpose="find"))
        names = parts(beneath, path)
        matches: list[Match] = []
        scanned = 0
        truncated = False

        def scan(name: str, dir_fd: int, shown: str) -> bool:
            """Add the matches of one file; False once the results are full."""
            nonlocal scanned
            scanned += 1
            matches.extend(
                Match(path=shown, line_number=number, line=_excerpt(line, query))
                for number, line in files.lines(name, dir_fd, limit_bytes=SEARCH_FILE_BYTES)
                if query in line
            )
            return len(matches) <= max_results

        if not stat.S_ISDIR(mode_of(names, path)):
            with os_errors(path), beneath.directory(names[:-1]) as parent:
                truncated = not scan(names[-1], parent, "/".join(names))
        else:
            with (
                directory_to_read(names, path) as fd,
                closing(walk(beneath, fd, _prefix(names), recursive=True)) as found,
            ):
                for candidate in found:
                    if candidate.kind != "file" or not fnmatch(candidate.name, glob):
                        continue
                    if scanned == SEARCH_FILE_LIMIT or not scan(candidate.name, candidate.dir_fd, candidate.path):
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
        file whose old content cannot be kept (binary, over the limit, a symlink or a special file).
        With `idempotency_key`, a repeat (even after a server crash) returns the first result and
        writes nothing new.
        """
        names = parts(beneath, path)
        size = len(content.encode())
        if size > max_write_bytes:
            raise ToolError(CONTENT_TOO_LARGE.format(size=size, tool="write_file", limit=max_write_bytes))
        shown = "/".join(names)

        def describe() -> Written:
            previous = files.read_existing(names, path, tool="write_file", limit_bytes=max_write_bytes)
            return Written(
                path=shown,
                sha256=sha256(content),
                size_bytes=size,
                created=previous is None,
                previous_sha256=None if previous is None else sha256(previous),
                previous_content=previous,
            )

        if idempotency_key is None:
            written = describe()
            return written.model_copy(update={"created_directories": files.replace_text(names, path, content)})
        # The promise is journaled before the write and marked done after it: a crash in between
        # leaves a promise that the replay keeps, with the content that was there first.
        entry = journal.get(idempotency_key)
        if entry is None:
            entry = {"written": describe().model_dump(), "done": False}
            journal.put(idempotency_key, entry)
        written = Written.model_validate(entry["written"])
        if (written.path, written.sha256) != (shown, sha256(content)):
            raise ToolError(KEY_REUSED.format(key=idempotency_key, path=written.path))
        if not entry["done"]:
            written = written.model_copy(update={"created_directories": files.replace_text(names, path, content)})
            journal.put(idempotency_key, {"written": written.model_dump(), "done": True})
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
        names = parts(beneath, path)
        text = files.read_text(
            names, path, tool="edit_file", limit_bytes=max_write_bytes, fix="it is too large to edit"
        )
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
        files.replace_text(names, path, updated)
        return Edited(
            path="/".join(names),
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
        prune: PruneArg = [],
    ) -> Moved:
        """Move or rename a file or directory inside the workspace (parent directories are created).

        Never overwrites: an existing destination is refused. A symlink is moved as a link. Undo by
        moving it back, with the directories it made (`created_directories`) as `prune`.
        """
        origin, target = parts(beneath, source), parts(beneath, destination)
        if not origin:
            raise ToolError(ROOT_NOT_MOVABLE.format(path=source))
        if not target:
            raise ToolError(DESTINATION_EXISTS.format(path=destination))
        emptied = [parts(beneath, directory) for directory in prune]
        made: list[int] = []
        with os_errors(source), beneath.directory(origin[:-1]) as from_dir:
            os.stat(origin[-1], dir_fd=from_dir, follow_symlinks=False)
            with os_errors(destination), beneath.directory(target[:-1], create=True, made=made) as to_dir:
                try:
                    os.stat(target[-1], dir_fd=to_dir, follow_symlinks=False)
                except FileNotFoundError:
                    os.rename(origin[-1], target[-1], src_dir_fd=from_dir, dst_dir_fd=to_dir)
                else:
                    raise ToolError(DESTINATION_EXISTS.format(path=destination))
        files.prune(emptied)
        created = ["/".join(target[:depth]) for depth in made]
        return Moved(source="/".join(origin), destination="/".join(target), created_directories=created)

    @mcp.tool(title="Delete a file", annotations=REMOVES)
    def delete_file(path: PathArg, prune: PruneArg = []) -> Deleted:
        """Delete one text file from the workspace and return its content, so it can be restored.

        Directories, symlinks, special files, binary files and files over the write limit are
        refused (their content could not be returned for undo). Then each directory of `prune`
        that is empty is removed, also when the file was already gone (a repeated undo).
        """
        names = parts(beneath, path)
        emptied = [parts(beneath, directory) for directory in prune]
        try:
            content = files.delete_text(
                names, path, limit_bytes=max_write_bytes, fix="its content could not be returned for undo, so it is kept"
            )
        finally:
            pruned = files.prune(emptied)
        return Deleted(path="/".join(names), sha256=sha256(content), deleted_content=content, pruned_directories=pruned)

    return mcp


def _prefix(names: Sequence[str]) -> str:
    """How entries of the directory `names` begin, relative to the root."""
    return "".join(name + "/" for name in names)


def _excerpt(line: str, query: str) -> str:
    """At most SEARCH_LINE_CHARS of `line`, starting a little before the first match."""
    start = max(0, min(line.find(query) - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
    return line[start : start + SEARCH_LINE_CHARS]


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1
