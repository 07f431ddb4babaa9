"""A corpus of hostile paths, each tried with every path-taking workspace tool over a real server.

For every case and every tool: the call ends within seconds (a FIFO or device must not hang it),
no answer shows anything from outside the root, and nothing outside the root changes. Cases marked
REFUSED must also fail with every tool; the others name a place inside the root (a literal odd name,
a '..' that stays inside) and may succeed there. The layout is rebuilt before each case, and after
any call that changed it.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from tests.mcp_servers.launch import http
from tests.security.attacks import Attacks

SECRET = "SECRET-OUTSIDE"
OUTSIDE_ONLY = "outside-only-name.txt"
HOST_SECRETS = ("root:x:0:0", "root:*:", "root:!:", "root:$")  # /etc/passwd and /etc/shadow lines
CALL_TIMEOUT_S = 5.0
ALL = frozenset({"list_files", "read_file", "search", "write_file", "edit_file", "move_from", "move_to", "delete_file"})
# Moving a special file or a hard link moves the name only; listing or searching one finds nothing to show.
ALL_BUT_MOVE_AND_SEARCH = ALL - {"move_from", "move_to", "search"}
CONTAINED: frozenset[str] = frozenset()

# (path template, tools that must refuse it). {root} and {outside} are filled in.
CORPUS: list[tuple[str, frozenset[str]]] = [
    # traversal
    ("..", ALL),
    ("../", ALL),
    ("../outside/secret.txt", ALL),
    ("../../../../../../../../etc/passwd", ALL),
    ("dir/../../outside/secret.txt", ALL),
    ("dir/../..", ALL),
    ("./../outside/secret.txt", ALL),
    ("dir/./../../outside/secret.txt", ALL),
    ("dir//..//..//outside/secret.txt", ALL),
    ("../outside/secret.txt\n", ALL),
    ("dir/../inside.txt", CONTAINED),
    ("...", CONTAINED),
    (" ../outside/secret.txt", CONTAINED),
    # absolute
    ("/etc/passwd", ALL),
    ("/etc/shadow", ALL),
    ("//etc/passwd", ALL),
    ("/", ALL),
    ("{outside}/secret.txt", ALL),
    ("{root}/../outside/secret.txt", ALL),
    ("{root}/dir/../../outside/secret.txt", ALL),
    ("{root}x/secret.txt", ALL),
    ("/proc/self/root/etc/passwd", ALL),
    ("/proc/self/cwd/x", ALL),
    ("{root}", CONTAINED),
    ("{root}/inside.txt", CONTAINED),
    ("", CONTAINED),
    # home
    ("~", ALL),
    ("~/.bashrc", ALL),
    ("~root/.bashrc", ALL),
    # NUL
    ("inside.txt\0", ALL),
    ("\0../outside/secret.txt", ALL),
    ("dir/\0/x", ALL),
    # encoded and look-alike: literal names inside the root, never decoded
    ("%2e%2e/outside/secret.txt", CONTAINED),
    ("..%2foutside%2fsecret.txt", CONTAINED),
    ("..\\outside\\secret.txt", CONTAINED),
    ("file:///etc/passwd", CONTAINED),
    ("\u2025/outside/secret.txt", CONTAINED),
    ("\uff0e\uff0e/outside/secret.txt", CONTAINED),
    (".\u200b./outside/secret.txt", CONTAINED),
    ("\u202etxt.terces", CONTAINED),
    ("e\u0301.txt", CONTAINED),
    # symlinks: none is followed, wherever it points
    ("link_file", ALL - {"move_from"}),
    ("link_file/", ALL - {"move_from"}),
    ("link_dir", ALL - {"move_from"}),
    ("link_dir/secret.txt", ALL),
    ("link_dir/sub/secret.txt", ALL),
    ("link_dir/.", ALL - {"move_from"}),
    ("link_dir/..", CONTAINED),
    ("link_file/../inside.txt", CONTAINED),
    ("link_in", ALL - {"move_from"}),
    ("link_dir_in/inside.txt", ALL),
    ("loop", ALL - {"move_from"}),
    ("loop_a/x", ALL),
    ("up", ALL - {"move_from"}),
    ("up/outside/secret.txt", ALL),
    ("dot/inside.txt", ALL),
    ("abs_root/inside.txt", ALL),
    ("proc_link/etc/passwd", ALL),
    ("dir/deep_link/secret.txt", ALL),
    # hard links to a file outside (and one made inside: the outside name may be anywhere)
    ("hard", ALL_BUT_MOVE_AND_SEARCH),
    ("dir/hard", ALL_BUT_MOVE_AND_SEARCH),
    # special files
    ("fifo", ALL_BUT_MOVE_AND_SEARCH),
    ("dir/fifo", ALL_BUT_MOVE_AND_SEARCH),
    ("dev_zero", ALL_BUT_MOVE_AND_SEARCH),
    ("dev_null", ALL_BUT_MOVE_AND_SEARCH),
    ("sock", ALL_BUT_MOVE_AND_SEARCH),
    # long
    ("a" * 300, ALL),
    ("/".join(["b" * 200] * 25), CONTAINED),
    ("dir/" + "../" * 40 + "etc/passwd", ALL),
]


def arguments(tool: str, path: str) -> tuple[str, dict[str, Any]]:
    """The real tool name and its arguments with `path` in the path-taking position."""
    return {
        "list_files": ("list_files", {"path": path}),
        "read_file": ("read_file", {"path": path}),
        "search": ("search", {"query": "SECRET", "path": path}),
        "write_file": ("write_file", {"path": path, "content": "pwned"}),
        "edit_file": ("edit_file", {"path": path, "old": "SECRET", "new": "pwned"}),
        "move_from": ("move_file", {"source": path, "destination": "moved"}),
        "move_to": ("move_file", {"source": "inside.txt", "destination": path}),
        "delete_file": ("delete_file", {"path": path}),
    }[tool]


@dataclass(frozen=True)
class Layout:
    root: Path
    outside: Path

    def build(self) -> None:
        """Empty the root (the server holds it open, so it stays) and fill it again."""
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        if self.outside.exists():
            shutil.rmtree(self.outside)
        (self.outside / "sub").mkdir(parents=True)
        for name in ("secret.txt", "sub/secret.txt", OUTSIDE_ONLY, "hard-target.txt", "hard-target-2.txt"):
            (self.outside / name).write_text(f"{SECRET} {name}\n")
        root = self.root
        (root / "dir").mkdir()
        (root / "inside.txt").write_text("inside\n")
        (root / "dir" / "inside.txt").write_text("inside\n")
        (root / "link_file").symlink_to(self.outside / "secret.txt")
        (root / "link_dir").symlink_to(self.outside)
        (root / "link_in").symlink_to("inside.txt")
        (root / "link_dir_in").symlink_to("dir")
        (root / "loop").symlink_to("loop")
        (root / "loop_a").symlink_to("loop_b")
        (root / "loop_b").symlink_to("loop_a")
        (root / "up").symlink_to("..")
        (root / "dot").symlink_to(".")
        (root / "abs_root").symlink_to(root)
        (root / "proc_link").symlink_to("/proc/self/root")
        (root / "dir" / "deep_link").symlink_to("../../outside")
        os.link(self.outside / "hard-target.txt", root / "hard")
        os.link(self.outside / "hard-target-2.txt", root / "dir" / "hard")
        os.mkfifo(root / "fifo")
        os.mkfifo(root / "dir" / "fifo")
        if os.geteuid() == 0:
            os.mknod(root / "dev_zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
            os.mknod(root / "dev_null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(root / "sock"))

    def root_state(self) -> set[tuple[str, int]]:
        """Every name under the root with its inode: what a call that succeeded may have changed."""
        return {  # by descriptor: a contained success may have made paths longer than PATH_MAX
            (os.path.join(directory, name), os.stat(name, dir_fd=fd, follow_symlinks=False).st_ino)
            for directory, subdirectories, files, fd in os.fwalk(self.root)
            for name in [*subdirectories, *files]
        }

    def outside_state(self) -> dict[str, tuple[int, str]]:
        return {
            str(path.relative_to(self.outside)): (path.stat().st_ino, path.read_text())
            for path in sorted(self.outside.rglob("*"))
            if path.is_file()
        }


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    base = tmp_path_factory.mktemp("escape")
    (base / "root").mkdir()
    return Layout(root=base / "root", outside=base / "outside")


@pytest.fixture(scope="module")
def url(layout: Layout) -> Iterator[str]:
    with http("workspace", "--root", str(layout.root), "--journal-dir", str(layout.root.parent / "journal")) as served:
        yield served


def shows_outside(result: CallToolResult) -> bool:
    text = str(result.structured_content) + "".join(getattr(part, "text", "") for part in result.content)
    return any(mark in text for mark in (SECRET, OUTSIDE_ONLY, *HOST_SECRETS))


def test_the_corpus_is_large_and_covers_every_path_taking_tool() -> None:
    assert len(CORPUS) >= 50
    assert len(ALL) == 8


@pytest.mark.parametrize(("template", "must_refuse"), CORPUS, ids=[repr(t)[:40] for t, _ in CORPUS])
async def test_no_tool_reaches_outside_the_root(
    url: str, layout: Layout, template: str, must_refuse: frozenset[str], attacks: Attacks
) -> None:
    if template.startswith("dev_") and os.geteuid() != 0:
        pytest.skip("making device files needs root")
    path = template.format(root=layout.root, outside=layout.outside)
    failures = []
    layout.build()
    built, before = layout.root_state(), layout.outside_state()
    async with Client(url) as client:
        for tool in sorted(ALL):
            if layout.root_state() != built:  # the last call changed the root (a contained success)
                layout.build()
                built, before = layout.root_state(), layout.outside_state()
            name, args = arguments(tool, path)
            with anyio.fail_after(CALL_TIMEOUT_S):
                result = await client.call_tool(name, args)
            if shows_outside(result):
                failures.append(f"{tool} showed outside content: {result.content}")
            if (after := layout.outside_state()) != before:
                failures.append(f"{tool} changed the outside: {after}")
                layout.build()
                before = layout.outside_state()
            if tool in must_refuse and not result.is_error:
                failures.append(f"{tool} succeeded: {result.structured_content}")
    attacks.record("path-escape", attempts=len(ALL), escapes=len({failure.split()[0] for failure in failures}))
    assert failures == []


async def test_the_layout_is_usable_inside(url: str, layout: Layout) -> None:
    """The control: plain paths inside the root work, so the refusals above are about the paths."""
    layout.build()
    async with Client(url) as client:
        read = await client.call_tool("read_file", {"path": "dir/inside.txt"})
        listed = await client.call_tool("list_files", {"path": "."})
    assert read.structured_content is not None and read.structured_content["content"] == "inside\n"
    assert listed.structured_content is not None
    kinds = {entry["path"]: entry["kind"] for entry in listed.structured_content["entries"]}
    assert (kinds["dir"], kinds["link_dir"], kinds["fifo"], kinds["sock"]) == ("directory", "symlink", "other", "other")
