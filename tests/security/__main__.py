"""python -m tests.security: run the security suite, then print what it tried and what got through.

Runs tests/security with pytest (or the pytest arguments given after `--`), then prints one row per
attack family (tests/security/attacks.py): attempts, escapes or bypasses, and the file that tries
them, with a total row, and writes the same table as JSON (--json). Exits 1 when a test failed,
anything escaped, or, on a full run, a family tried nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.security.attacks import FAMILIES

PROJECT = Path(__file__).resolve().parents[2]
SUITE = "tests/security"
DEFAULT_JSON = PROJECT / ".boundloop" / "security-table.json"
HEADER = ("family", "attempts", "escapes/bypasses", "test file")


def rows(tally: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """One row per family, in the families' order; `ran` is False for a family that recorded nothing."""
    return [{"family": name, "attempts": tally.get(name, {}).get("attempts", 0), "escapes": tally.get(name, {}).get("escapes", 0),
             "file": f"{SUITE}/{family.file}", "ran": name in tally} for name, family in FAMILIES.items()]


def problems(table: list[dict[str, Any]], *, pytest_status: int, full_run: bool) -> list[str]:
    """Why the suite does not hold, one line each; none when it holds."""
    found = [f"{row['family']}: {row['escapes']} of {row['attempts']} attempts got through ({row['file']})"
             for row in table if row["escapes"]]
    if full_run:
        found += [f"{row['family']}: nothing was tried; {row['file']} did not run or records no attempts"
                  for row in table if not row["attempts"]]
    if pytest_status != 0:
        found.append(f"pytest exited {pytest_status}: a security test failed or none ran (its output is above)")
    return found


def render(table: list[dict[str, Any]]) -> str:
    """The table as aligned text, with a total row over the families that ran."""
    total = ("total", str(sum(row["attempts"] for row in table)), str(sum(row["escapes"] for row in table)), "")
    lines = [(row["family"], str(row["attempts"]) if row["ran"] else "not run", str(row["escapes"]) if row["ran"] else "-", row["file"])
             for row in table]
    widths = [max(len(line[column]) for line in [HEADER, *lines, total]) for column in range(4)]

    def joined(line: tuple[str, ...]) -> str:
        return " | ".join(cell.rjust(width) if column in (1, 2) else cell.ljust(width)
                          for column, (cell, width) in enumerate(zip(line, widths))).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([joined(HEADER), rule, *map(joined, lines), rule, joined(total).rstrip(" |")])


def names_a_path(arguments: list[str]) -> bool:
    return any(not argument.startswith("-") and (PROJECT / argument.split("::")[0]).exists() for argument in arguments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.security", description=__doc__.split("\n\n")[0])
    parser.add_argument("--race-seconds", type=float, metavar="N", help="how long the symlink race runs (default: 4)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH", help="where the table is written (default: %(default)s)")
    parser.add_argument("pytest_args", nargs="*", help="after `--`: pytest arguments narrowing the suite (default: all of tests/security)")
    args = parser.parse_args(argv)
    selection = list(args.pytest_args)
    if not names_a_path(selection):
        selection.append(SUITE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="boundloop-security-") as scratch:
        recorded = Path(scratch) / "attacks.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--attacks-json", str(recorded)]
        command += ["--race-seconds", str(args.race_seconds)] if args.race_seconds is not None else []
        status = subprocess.run([*command, *selection], cwd=PROJECT).returncode
        tally = json.loads(recorded.read_text())["families"] if recorded.exists() else {}
    table = rows(tally)
    found = problems(table, pytest_status=status, full_run=not args.pytest_args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"families": table, "total": {"attempts": sum(row["attempts"] for row in table),
                                                                  "escapes": sum(row["escapes"] for row in table)},
                                     "pytest_exit_code": status, "problems": found, "holds": not found}, indent=1) + "\n")
    print()
    print(render(table))
    print(f"\n{time.monotonic() - started:.0f} s; the table is also in {args.json}")
    for problem in found:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
