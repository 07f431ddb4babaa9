"""Each workspace tool does its job over stdio, and says exactly what went wrong when it cannot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client

from boundloop.mcp_servers.workspace.files import NOT_TEXT
from boundloop.mcp_servers.workspace.server import (
    CONTENT_TOO_LARGE,
    DESTINATION_EXISTS,
    KEY_REUSED,
    OFFSET_PAST_END,
    OLD_NOT_FOUND,
    OLD_NOT_UNIQUE,
)
from tests.mcp_servers.launch import error_text, hints, stdio, structured


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@asynccontextmanager
async def workspace(root: Path, *flags: str) -> AsyncIterator[Client]:
    journal = root.parent / "journal"
    async with stdio("workspace", "--root", str(root), "--journal-dir", str(journal), *flags) as (client, _):
        yield client


async def test_tools_are_listed_with_titles_descriptions_schemas_and_annotations(root: Path) -> None:
    """Reads are read-only and idempotent; writes are destructive; nothing is open-world."""
    async with workspace(root) as client:
        tools = (await client.list_tools()).tools
    assert hints(tools) == {
        "list_files": (True, False, True, False),
        "read_file": (True, False, True, False),
        "search": (True, False, True, False),
        "write_file": (False, True, True, False),
        "edit_file": (False, True, False, False),
        "move_file": (False, True, False, False),
        "delete_file": (False, True, True, False),
    }
    assert all(tool.title and tool.description and tool.output_schema for tool in tools)


async def test_list_files_lists_one_level_or_recursively_by_pattern(root: Path) -> None:
    """Entries carry kind and size; the pattern matches names at every depth."""
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print()\n")
    (root / "notes.md").write_text("# notes\n")
    async with workspace(root) as client:
        top = structured(await client.call_tool("list_files", {}))
        python = structured(await client.call_tool("list_files", {"pattern": "*.py", "recursive": True}))
    assert top == {
        "entries": [
            {"path": "notes.md", "kind": "file", "size_bytes": 8},
            {"path": "src", "kind": "directory", "size_bytes": None},
        ],
        "truncated": False,
    }
    assert python["entries"] == [{"path": "src/app.py", "kind": "file", "size_bytes": 8}]


async def test_read_file_pages_through_a_file_with_next_offset(root: Path) -> None:
    """A bounded read says where to continue; the last page says there is nothing more."""
    (root / "a.txt").write_text("0123456789")
    async with workspace(root) as client:
        first = structured(await client.call_tool("read_file", {"path": "a.txt", "max_chars": 6}))
        rest = structured(await client.call_tool("read_file", {"path": "a.txt", "offset": first["next_offset"]}))
    assert (first["content"], first["next_offset"], first["total_chars"]) == ("012345", 6, 10)
    assert (rest["content"], rest["next_offset"]) == ("6789", None)


async def test_read_file_stops_at_the_servers_read_limit(root: Path) -> None:
    """A caller cannot ask for more than --max-read-chars at once."""
    (root / "a.txt").write_text("x" * 50)
    async with workspace(root, "--max-read-chars", "20") as client:
        page = structured(await client.call_tool("read_file", {"path": "a.txt", "max_chars": 1000}))
    assert (len(page["content"]), page["next_offset"]) == (20, 20)


async def test_read_file_refuses_an_offset_past_the_end_and_binary_files(root: Path) -> None:
    """Both messages name the file and what the tool accepts."""
    (root / "a.txt").write_text("abc")
    (root / "image.png").write_bytes(b"\x89PNG\r\n")
    async with workspace(root) as client:
        past_end = await client.call_tool("read_file", {"path": "a.txt", "offset": 4})
        binary = await client.call_tool("read_file", {"path": "image.png"})
    assert error_text(past_end) == "Error executing tool read_file: " + OFFSET_PAST_END.format(
        offset=4, path="a.txt", total=3
    )
    assert error_text(binary) == "Error executing tool read_file: " + NOT_TEXT.format(
        path="image.png", reason="invalid start byte at byte 0"
    )


async def test_search_finds_lines_by_literal_text_within_the_glob(root: Path) -> None:
    """Matches name the file and the 1-based line; other file types are not searched."""
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("import os\nTODO: fix\n")
    (root / "pkg" / "b.md").write_text("TODO: docs\n")
    async with workspace(root) as client:
        result = structured(await client.call_tool("search", {"query": "TODO", "glob": "*.py"}))
    assert result == {
        "matches": [{"path": "pkg/a.py", "line_number": 2, "line": "TODO: fix"}],
        "files_scanned": 1,
        "truncated": False,
    }


async def test_search_stops_at_max_results_and_says_so(root: Path) -> None:
    """Results are bounded, and `truncated` tells the caller there is more."""
    (root / "many.txt").write_text("hit\n" * 10)
    async with workspace(root) as client:
        result = structured(await client.call_tool("search", {"query": "hit", "max_results": 3}))
    assert (len(result["matches"]), result["truncated"]) == (3, True)


async def test_write_file_creates_parents_then_returns_what_it_replaced(root: Path) -> None:
    """The first write reports a new file; the second returns the first content, for undo."""
    async with workspace(root) as client:
        created = structured(await client.call_tool("write_file", {"path": "a/b/c.txt", "content": "one"}))
        replaced = structured(await client.call_tool("write_file", {"path": "a/b/c.txt", "content": "two"}))
    assert (created["created"], created["previous_content"], created["previous_sha256"]) == (True, None, None)
    assert (replaced["created"], replaced["previous_content"]) == (False, "one")
    assert replaced["previous_sha256"] == created["sha256"]
    assert (root / "a" / "b" / "c.txt").read_text() == "two"


async def test_write_file_replayed_with_its_key_returns_the_first_result_and_writes_nothing(root: Path) -> None:
    """The replay still reports the content the first write replaced, so compensation stays correct."""
    (root / "a.txt").write_text("original")
    call = {"path": "a.txt", "content": "new", "idempotency_key": "run-1/call-3"}
    async with workspace(root) as client:
        first = structured(await client.call_tool("write_file", call))
        replay = structured(await client.call_tool("write_file", call))
    assert replay == first
    assert replay["previous_content"] == "original"


async def test_write_file_refuses_a_key_reused_for_other_content(root: Path) -> None:
    """A key names one write; different content under the same key is refused and not written."""
    async with workspace(root) as client:
        await client.call_tool("write_file", {"path": "a.txt", "content": "one", "idempotency_key": "k"})
        reused = await client.call_tool("write_file", {"path": "a.txt", "content": "two", "idempotency_key": "k"})
    assert error_text(reused) == "Error executing tool write_file: " + KEY_REUSED.format(key="k", path="a.txt")
    assert (root / "a.txt").read_text() == "one"


async def test_write_file_refuses_content_over_the_write_limit(root: Path) -> None:
    """The limit comes from --max-write-bytes; nothing is written."""
    async with workspace(root, "--max-write-bytes", "10") as client:
        result = await client.call_tool("write_file", {"path": "a.txt", "content": "x" * 11})
    assert error_text(result) == "Error executing tool write_file: " + CONTENT_TOO_LARGE.format(
        size=11, tool="write_file", limit=10
    )
    assert not (root / "a.txt").exists()


async def test_edit_file_replaces_the_one_occurrence_and_returns_the_previous_content(root: Path) -> None:
    """The rest of the file is untouched; the result holds the whole file as it was."""
    (root / "a.py").write_text("x = 1\ny = 2\n")
    async with workspace(root) as client:
        edited = structured(await client.call_tool("edit_file", {"path": "a.py", "old": "y = 2", "new": "y = 3"}))
    assert edited["previous_content"] == "x = 1\ny = 2\n"
    assert (root / "a.py").read_text() == "x = 1\ny = 3\n"


async def test_edit_file_refuses_old_text_that_is_missing_or_not_unique(root: Path) -> None:
    """Nothing changes when the match is not exactly one; the message says how to fix the call."""
    (root / "a.py").write_text("pass\nx = 1\npass\n")
    async with workspace(root) as client:
        missing = await client.call_tool("edit_file", {"path": "a.py", "old": "y = 1", "new": "y = 2"})
        twice = await client.call_tool("edit_file", {"path": "a.py", "old": "pass", "new": "return"})
    assert error_text(missing) == "Error executing tool edit_file: " + OLD_NOT_FOUND.format(path="a.py")
    assert error_text(twice) == "Error executing tool edit_file: " + OLD_NOT_UNIQUE.format(
        path="a.py", first=1, second=3
    )
    assert (root / "a.py").read_text() == "pass\nx = 1\npass\n"


async def test_move_file_moves_into_new_directories_but_never_overwrites(root: Path) -> None:
    """Missing parent directories are created; an existing destination is refused."""
    (root / "a.txt").write_text("a")
    (root / "b.txt").write_text("b")
    async with workspace(root) as client:
        moved = structured(await client.call_tool("move_file", {"source": "a.txt", "destination": "old/a.txt"}))
        clash = await client.call_tool("move_file", {"source": "b.txt", "destination": "old/a.txt"})
    assert moved == {"source": "a.txt", "destination": "old/a.txt", "created_directories": ["old"]}
    assert error_text(clash) == "Error executing tool move_file: " + DESTINATION_EXISTS.format(path="old/a.txt")
    assert ((root / "old" / "a.txt").read_text(), (root / "b.txt").read_text()) == ("a", "b")


async def test_delete_file_returns_the_deleted_content_and_refuses_directories(root: Path) -> None:
    """The content comes back for undo; a directory is refused with the fix."""
    (root / "a.txt").write_text("keep me")
    (root / "dir").mkdir()
    async with workspace(root) as client:
        deleted = structured(await client.call_tool("delete_file", {"path": "a.txt"}))
        directory = await client.call_tool("delete_file", {"path": "dir"})
    assert (deleted["path"], deleted["deleted_content"]) == ("a.txt", "keep me")
    assert not (root / "a.txt").exists()
    assert error_text(directory) == (
        "Error executing tool delete_file: path 'dir': Is a directory; pass the path of a file, not a directory"
    )
