"""The security suite's command and its table: `python -m tests.security` on a small selection
prints every family with its counts, writes the same table as JSON, and fails when anything escaped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.security.__main__ import problems, render, rows
from tests.security.attacks import FAMILIES
from tests.security.test_path_arguments import NAMED_ONLY

HERE = Path(__file__).parent


def test_every_family_is_tried_and_recorded_by_its_own_file() -> None:
    for family, (file, _) in FAMILIES.items():
        assert re.search(rf'attacks\.record\(\s*"{family}"', (HERE / file).read_text()), f"{file} records no {family!r} attempt"


def test_the_command_runs_a_selection_and_prints_and_writes_its_table(tmp_path: Path) -> None:
    table = tmp_path / "table.json"
    ran = subprocess.run([sys.executable, "-m", "tests.security", "--json", str(table), "--",
                          "tests/security/test_path_arguments.py", "-k", "fails_closed"],
                         cwd=HERE.parents[1], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    header = next(index for index, line in enumerate(lines) if line.startswith("family "))
    assert [cell.strip() for cell in lines[header].split("|")] == ["family", "attempts", "escapes/bypasses", "test file"]
    shown = {line.split("|")[0].strip(): [cell.strip() for cell in line.split("|")[1:]] for line in lines[header + 2:] if "|" in line}
    assert shown["path-arguments"] == [str(len(NAMED_ONLY)), "0", "tests/security/test_path_arguments.py"]
    assert shown["race"][:2] == ["not run", "-"]
    assert shown["total"] == [str(len(NAMED_ONLY)), "0"]
    written = json.loads(table.read_text())
    assert [row["family"] for row in written["families"]] == list(FAMILIES)
    assert (written["total"], written["holds"], written["pytest_exit_code"]) == ({"attempts": len(NAMED_ONLY), "escapes": 0}, True, 0)


def test_an_escape_a_failed_test_or_a_family_that_tried_nothing_fails_the_suite() -> None:
    tally = {name: {"attempts": 3, "escapes": 0} for name in FAMILIES} | {"race": {"attempts": 40, "escapes": 1}}
    assert problems(rows(tally), pytest_status=0, full_run=True) == [
        "race: 1 of 40 attempts got through (tests/security/test_race.py)"]
    total = [cell.strip() for cell in render(rows(tally)).splitlines()[-1].split("|")]
    assert total[:3] == ["total", str(3 * (len(FAMILIES) - 1) + 40), "1"]
    del tally["race"]
    assert problems(rows(tally), pytest_status=1, full_run=True) == [
        "race: nothing was tried; tests/security/test_race.py did not run or records no attempts",
        "pytest exited 1: a security test failed or none ran (its output is above)"]
    assert problems(rows(tally), pytest_status=0, full_run=False) == []
