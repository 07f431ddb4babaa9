"""No workspace call escapes the root while a directory on its path is swapped for a symlink.

Three angles: the timed stress over a real server (tests/security/race.py; a longer run is
`python -m tests.security.race --seconds N`), a call held up mid-way by a FIFO while the swap is
made (deterministic: a check separate from the open would write outside every time), and both resolvers of
`beneath` (openat2 and the O_NOFOLLOW walk used where the kernel lacks it) under the same swapping.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from boundloop.mcp_servers.workspace.beneath import Beneath, openat2_available
from boundloop.mcp_servers.workspace.files import Files
from boundloop.mcp_servers.workspace.tree import walk
from tests.mcp_servers.launch import stdio
from tests.security.attacks import Attacks
from tests.security.race import DEEP, INSIDE, OUTSIDE_ONLY, SECRET, layout, stress, swapping



async def test_no_call_escapes_while_a_directory_is_swapped_for_a_symlink(tmp_path: Path, race_seconds: float, attacks: Attacks) -> None:
    """Reads, writes, edits, deletes, listings, searches and moves under `d/` never reach outside
    (for 4 s; `python -m tests.security --race-seconds N` races longer)."""
    tally = await stress(race_seconds, tmp_path)
    attacks.record("race", attempts=tally.total, escapes=len(tally.escapes))
    assert tally.escapes == []
    assert tally.total >= 7, f"the stress barely ran: {tally.calls}"


async def test_a_write_held_up_mid_call_cannot_be_redirected_outside(tmp_path: Path, attacks: Attacks) -> None:
    """`d/f.txt` is a FIFO: a server that opens it blocks there; the symlink goes in while it waits.

    A check-then-open server reads the FIFO, then writes through the swapped-in symlink. This one
    refuses the FIFO at once, and nothing outside changes either way.
    """
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET)
    os.mkfifo(root / "d" / "f.txt")
    async with stdio("workspace", "--root", str(root), "--journal-dir", str(tmp_path / "journal")) as (client, _):
        async with anyio.create_task_group() as race:
            done = anyio.Event()

            async def call() -> None:
                await client.call_tool("write_file", {"path": "d/f.txt", "content": "pwned"})
                done.set()

            race.start_soon(call)
            with anyio.fail_after(30):
                while not done.is_set():
                    try:  # succeeds only while the server holds the FIFO open for reading
                        writer = os.open(root / "d" / "f.txt", os.O_WRONLY | os.O_NONBLOCK)
                    except OSError as exc:
                        assert exc.errno == errno.ENXIO
                        await anyio.sleep(0.001)
                        continue
                    os.rename(root / "d", root / "d.real")
                    os.symlink(outside, root / "d")
                    try:
                        os.write(writer, b"old content")
                    except BrokenPipeError:  # the server had already let go of it
                        pass
                    os.close(writer)
                    await done.wait()
    attacks.record("race", attempts=1, escapes=(outside / "f.txt").read_text() != SECRET or sorted(os.listdir(outside)) != ["f.txt"])
    assert (outside / "f.txt").read_text() == SECRET
    assert sorted(os.listdir(outside)) == ["f.txt"]


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_both_resolvers_hold_under_the_same_swapping(tmp_path: Path, resolver: str, attacks: Attacks) -> None:
    """The O_NOFOLLOW walk is what runs where openat2 is missing; it must hold as well."""
    if resolver == "openat2" and not openat2_available():
        pytest.skip("this kernel has no openat2")
    deep = ("d", *DEEP.split("/"))
    escapes: list[str] = []
    attempts = 0
    with layout(tmp_path) as place, swapping(place):
        beneath = Beneath(place.root, use_openat2=resolver == "openat2")
        files = Files(beneath, allow_hard_links=False)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            attempts += 1
            try:
                text = files.read_text((*deep, "f.txt"), "f", tool="t", limit_bytes=1000, fix="")
                escapes += [f"read {text!r}"] if SECRET in text else []
            except (OSError, ToolError):  # refused or missing at this instant: both are fine
                pass
            try:
                files.replace_text((*deep, "new.txt"), "n", "written")
            except (OSError, ToolError):
                pass
            try:
                with beneath.directory(deep[:-1]) as parent:
                    fd = beneath.open([deep[-1]], os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent)
                try:
                    names = [found.name for found in walk(beneath, fd, "", recursive=False)]
                finally:
                    os.close(fd)
                escapes += [f"listed {names}"] if OUTSIDE_ONLY in names else []
            except (OSError, ToolError):
                pass
            escapes += place.outside_changes()
            place.refill()
        beneath.close()
    attacks.record("race", attempts=3 * attempts, escapes=len(escapes))  # a read, a write and a listing each time
    assert escapes == []
    assert attempts >= 10
    assert set(INSIDE) <= {str(p.relative_to(place.root / "d")) for p in (place.root / "d").rglob("*.txt")}
