"""race: swap a workspace directory for a symlink to outside while every workspace tool runs on it.

`python -m tests.security.race --seconds N` runs the stress for N seconds against a real workspace
server over stdio and prints the tally; it exits 1 if anything escaped. The default suite runs it
for a few seconds (tests/security/test_race.py).

The layout: `root/d` is a real directory holding a chain of 30 nested directories with `f.txt`,
`victim.txt` and `m.txt` at its bottom; `outside` holds the same chain and names, with content that
says SECRET. (A deep chain makes a check-then-open long, as an attacker would choose it.) A
separate process (`swapper`, so it never waits for our GIL) exchanges `d` with a symlink to
`outside` over and over, atomically. Meanwhile concurrent callers read, write, edit, delete, list,
search and move under `d/`. An escape is any answer that shows outside content or names, or any
change to `outside`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.mcp_servers.launch import stdio
from tests.security.swapper import settle

SECRET = "SECRET"
OUTSIDE_ONLY = "outside-only.txt"
DEEP = "/".join(f"x{level}" for level in range(30))
INSIDE = {f"{DEEP}/f.txt": "token inside\n", f"{DEEP}/victim.txt": "victim\n", f"{DEEP}/m.txt": "move me\n"}
OUTSIDE = {name: f"{SECRET} {name}: token\n" for name in [*INSIDE, f"{DEEP}/{OUTSIDE_ONLY}"]}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": f"d/{DEEP}/f.txt"}),
    ("write_file", {"path": f"d/{DEEP}/new.txt", "content": "written\n"}),
    ("edit_file", {"path": f"d/{DEEP}/f.txt", "old": "token", "new": "token"}),
    ("delete_file", {"path": f"d/{DEEP}/victim.txt"}),
    ("list_files", {"path": f"d/{DEEP}"}),
    ("search", {"query": "token", "path": "d"}),
    ("move_file", {"source": f"d/{DEEP}/m.txt", "destination": "moved.txt"}),
]
CALLERS = 4
SWAPPER = Path(__file__).with_name("swapper.py")

@dataclass
class Tally:
    calls: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    """Calls that ended in an error (the directory was away, or a symlink was refused)."""
    escapes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@dataclass
class Layout:
    root: Path
    outside: Path
    inside_fd: int
    """The real `d`, whatever its name at the moment: refills go here, never through a symlink."""

    def refill(self) -> None:
        """Put back what deletes and moves took from the real `d`, and remove what writes added."""
        for name, text in INSIDE.items():
            with contextlib.suppress(FileExistsError):
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=self.inside_fd)
                with open(fd, "w") as file:
                    file.write(text)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{DEEP}/new.txt", dir_fd=self.inside_fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / "moved.txt")

    def outside_changes(self) -> list[str]:
        """What differs in `outside` from its first state; the state is restored after."""
        changes = []
        present = {str(path.relative_to(self.outside)) for path in self.outside.rglob("*") if not path.is_dir()}
        for name in present - set(OUTSIDE):
            changes.append(f"created outside/{name}")
            (self.outside / name).unlink()
        for name, text in OUTSIDE.items():
            if name not in present:
                changes.append(f"removed outside/{name}")
            elif (self.outside / name).read_text() != text or (self.outside / name).stat().st_nlink != 1:
                changes.append(f"changed outside/{name}")
            else:
                continue
            (self.outside / name).unlink(missing_ok=True)
            (self.outside / name).write_text(text)
        return changes


@contextmanager
def layout(base: Path) -> Iterator[Layout]:
    root, outside = base / "root", base / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / DEEP).mkdir(parents=True)
    for name, text in OUTSIDE.items():
        (outside / name).write_text(text)
    (root / "d" / DEEP).mkdir(parents=True)
    inside_fd = os.open(root / "d", os.O_PATH | os.O_DIRECTORY)
    try:
        place = Layout(root=root, outside=outside, inside_fd=inside_fd)
        place.refill()
        yield place
    finally:
        os.close(inside_fd)


@contextmanager
def swapping(place: Layout) -> Iterator[None]:
    """The swapper process runs for the block, then is killed and reaped; the real `d` is put back."""
    swapper = subprocess.Popen(
        [sys.executable, str(SWAPPER), str(place.root), str(place.outside)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "swapping\n"
        yield
    finally:
        swapper.kill()
        swapper.wait()
        swapper.stdout.close()
        settle(str(place.root))


def _disclosed(result: Any) -> bool:
    text = str(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)
    return SECRET in text or OUTSIDE_ONLY in text


async def stress(seconds: float, base: Path) -> Tally:
    """Run the race for `seconds` against a workspace server over `base/root`; count calls and escapes."""
    tally = Tally()
    with layout(base) as place:
        async with stdio("workspace", "--root", str(place.root), "--journal-dir", str(base / "journal")) as (
            client,
            _,
        ):
            with swapping(place):
                deadline = time.monotonic() + seconds

                async def caller(offset: int) -> None:
                    turn = offset
                    while time.monotonic() < deadline:
                        tool, arguments = CALLS[turn % len(CALLS)]
                        turn += 1
                        result = await client.call_tool(tool, arguments)
                        tally.calls[tool] = tally.calls.get(tool, 0) + 1
                        tally.refused += bool(result.is_error)
                        if _disclosed(result):
                            tally.escapes.append(f"{tool} disclosed outside content: {str(result.content)[:300]}")
                        # Calls run concurrently: a change is seen after some call, not necessarily made by it.
                        tally.escapes.extend(f"after {tool}: {change}" for change in place.outside_changes())
                        place.refill()

                async with anyio.create_task_group() as callers:
                    for offset in range(CALLERS):
                        callers.start_soon(caller, offset)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.security.race", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to race (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="boundloop-race-") as base:
        tally = anyio.run(stress, args.seconds, Path(base))
    per_tool = ", ".join(f"{tool} {count}" for tool, count in sorted(tally.calls.items()))
    print(f"{tally.total} calls in {args.seconds:g} s ({per_tool})")
    print(f"refused: {tally.refused}; escapes: {len(tally.escapes)}")
    for escape in tally.escapes:
        print("  " + escape)
    sys.exit(1 if tally.escapes else 0)


if __name__ == "__main__":
    main()
