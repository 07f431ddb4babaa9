"""Every way a path could leave the workspace root is refused, by every tool, over streamable HTTP.

Decision under test: an absolute path is accepted when it lies inside the root (so paths copied
from tracebacks work) and refused otherwise; no symlink is followed, not even one that stays inside
the root (tests/security holds the larger corpus and the race test).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from boundloop.mcp_servers.workspace.files import OS_ERROR
from boundloop.mcp_servers.workspace.paths import HOME_NOT_EXPANDED, NUL_BYTE, OUTSIDE_ROOT
from tests.mcp_servers.launch import error_text, http, structured


SYMLINK_REFUSED = OS_ERROR.format(
    path="{path}",
    reason="Too many levels of symbolic links",
    fix="symlinks are never followed here; pass the path of the file itself (list_files shows links)",
).replace("'{path}'", "{path!r}")


@dataclass(frozen=True)
class Layout:
    root: Path
    outside: Path


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    """A root holding a file, symlinks out of it (to a file and to a directory) and one within it."""
    base = tmp_path_factory.mktemp("paths")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "inside.txt").write_text("inside")
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "dir_out").symlink_to(outside, target_is_directory=True)
    (root / "link_in").symlink_to(root / "inside.txt")
    return Layout(root=root, outside=outside)


@pytest.fixture(scope="module")
def url(layout: Layout) -> Iterator[str]:
    with http("workspace", "--root", str(layout.root)) as served:
        yield served


ESCAPES = [
    ("../x", OUTSIDE_ROOT),
    ("a/../../x", OUTSIDE_ROOT),
    ("/etc/passwd", OUTSIDE_ROOT),
    ("{outside}/secret.txt", OUTSIDE_ROOT),
    ("{root}/../outside/secret.txt", OUTSIDE_ROOT),
    ("~", HOME_NOT_EXPANDED),
    ("~/.ssh/id_rsa", HOME_NOT_EXPANDED),
    ("inside.txt\0.png", NUL_BYTE),
    ("link_out", SYMLINK_REFUSED),
    ("dir_out/secret.txt", SYMLINK_REFUSED),
]


@pytest.mark.parametrize(("template", "message"), ESCAPES)
async def test_read_file_refuses_a_path_that_leaves_the_root(
    url: str, layout: Layout, template: str, message: str
) -> None:
    """Traversal, absolute paths elsewhere, `~`, NUL bytes and symlinks out all fail with their own message."""
    path = template.format(root=layout.root, outside=layout.outside)
    async with Client(url) as client:
        result = await client.call_tool("read_file", {"path": path})
    assert error_text(result) == f"Error executing tool read_file: {message.format(path=path)}"


EVERY_TOOL = [
    ("list_files", {"path": "../x"}),
    ("read_file", {"path": "../x"}),
    ("search", {"query": "secret", "path": "../x"}),
    ("write_file", {"path": "../x", "content": "x"}),
    ("edit_file", {"path": "../x", "old": "a", "new": "b"}),
    ("move_file", {"source": "../x", "destination": "y"}),
    ("move_file", {"source": "inside.txt", "destination": "../x"}),
    ("delete_file", {"path": "../x"}),
]


@pytest.mark.parametrize(("tool", "arguments"), EVERY_TOOL)
async def test_every_tool_refuses_a_path_outside_the_root(url: str, tool: str, arguments: dict[str, Any]) -> None:
    """All tools pass every path argument through the same confinement."""
    async with Client(url) as client:
        result = await client.call_tool(tool, arguments)
    assert error_text(result) == f"Error executing tool {tool}: {OUTSIDE_ROOT.format(path='../x')}"


async def test_write_through_a_symlink_to_outside_is_refused_and_the_target_unchanged(url: str, layout: Layout) -> None:
    """A write via a symlinked file or a symlinked directory never reaches outside the root."""
    async with Client(url) as client:
        via_file = await client.call_tool("write_file", {"path": "link_out", "content": "pwned"})
        via_dir = await client.call_tool("write_file", {"path": "dir_out/new.txt", "content": "pwned"})
    assert error_text(via_file) == f"Error executing tool write_file: {SYMLINK_REFUSED.format(path='link_out')}"
    assert error_text(via_dir) == f"Error executing tool write_file: {SYMLINK_REFUSED.format(path='dir_out/new.txt')}"
    assert (layout.outside / "secret.txt").read_text() == "secret"
    assert not (layout.outside / "new.txt").exists()


async def test_a_symlink_created_after_startup_is_refused(url: str, layout: Layout) -> None:
    """Paths are resolved at every call, not once at startup."""
    (layout.root / "late_link").symlink_to(layout.outside / "secret.txt")
    async with Client(url) as client:
        result = await client.call_tool("read_file", {"path": "late_link"})
    assert error_text(result) == f"Error executing tool read_file: {SYMLINK_REFUSED.format(path='late_link')}"


async def test_an_absolute_path_inside_the_root_is_accepted(url: str, layout: Layout) -> None:
    """The result names the file relative to the root."""
    async with Client(url) as client:
        result = await client.call_tool("read_file", {"path": str(layout.root / "inside.txt")})
    assert structured(result)["path"] == "inside.txt"
    assert structured(result)["content"] == "inside"


async def test_a_symlink_that_stays_inside_the_root_is_refused_too(url: str) -> None:
    """No symlink is followed at any level, so none can be swapped to lead outside mid-call."""
    async with Client(url) as client:
        result = await client.call_tool("read_file", {"path": "link_in"})
    assert error_text(result) == f"Error executing tool read_file: {SYMLINK_REFUSED.format(path='link_in')}"
