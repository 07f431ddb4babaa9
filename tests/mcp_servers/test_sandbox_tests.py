"""run_tests: pytest in the sandbox, its JUnit report read back as counts and located failures.

Needs a pytest for the sandbox's python3 (tests/run.sh installs Debian's python3-pytest as root).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from boundloop.mcp_servers.sandbox.junit import parse_junit
from boundloop.mcp_servers.sandbox.server import NO_PYTEST
from tests.mcp_servers.launch import error_text, stdio, structured
from tests.mcp_servers.sandboxes import searchable_root

CALC = "def add(a, b):\n    return a - b\n"
TESTS = '''from calc import add


def test_add():
    assert add(1, 2) == 3


def test_add_zero():
    assert add(2, 0) == 2


def test_broken_import():
    import no_such_module  # noqa: F401
'''

needs_pytest = pytest.mark.skipif(
    subprocess.run(["/usr/bin/python3", "-c", "import pytest"], capture_output=True).returncode != 0,
    reason="no pytest for the system's python3: " + NO_PYTEST,
)


@pytest.fixture
def root() -> Iterator[Path]:
    with searchable_root() as path:
        yield path


@needs_pytest
async def test_failures_come_back_with_expected_actual_and_the_failing_line(root: Path) -> None:
    (root / "proj").mkdir(mode=0o777)
    (root / "proj").chmod(0o777)  # the sandbox runs as another user; the report is written here
    (root / "proj" / "calc.py").write_text(CALC)
    (root / "proj" / "test_calc.py").write_text(TESTS)
    async with stdio("sandbox", "--root", str(root)) as (client, _):
        report = structured(await client.call_tool("run_tests", {"cwd": "proj"}))
    assert (report["exit_code"], report["passed"], report["failed"]) == (1, 1, 2)
    failures = {failure["name"]: failure for failure in report["failures"]}
    add = failures["test_calc.test_add"]
    assert (add["expected"], add["actual"], add["location"]) == ("3", "-1", "test_calc.py:5")
    assert failures["test_calc.test_broken_import"]["location"] == "test_calc.py:13"
    assert failures["test_calc.test_broken_import"]["expected"] is None
    assert not [path.name for path in (root / "proj").iterdir() if path.name.startswith(".boundloop-junit")]


@needs_pytest
async def test_a_report_replaced_by_a_symlink_is_not_followed(root: Path) -> None:
    """The tests themselves may try to swap the report for a link to a host file; it is refused."""
    secret = root.parent / f"{root.name}-secret.xml"
    secret.write_text("<testsuites><testsuite name='forged'><testcase name='t'/></testsuite></testsuites>")
    (root / "test_swap.py").write_text(
        "import atexit, glob, os\n"
        "def _swap():\n"
        "    for path in glob.glob('.boundloop-junit-*.xml'):\n"
        f"        os.remove(path); os.symlink({str(secret)!r}, path)\n"
        "def test_ok():\n"
        "    atexit.register(_swap)\n"
    )
    try:
        async with stdio("sandbox", "--root", str(root)) as (client, _):
            result = await client.call_tool("run_tests", {})
    finally:
        secret.unlink()
    assert result.is_error
    assert "pytest wrote no test report" in error_text(result)


def test_a_report_with_an_entity_bomb_is_refused() -> None:
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><testsuites>&b;</testsuites>'
    with pytest.raises(ValueError, match="could not be read"):
        parse_junit(bomb)


def test_errors_and_skips_are_counted_apart_from_failures() -> None:
    xml = """<testsuites><testsuite name="s">
      <testcase classname="t" name="ok"/>
      <testcase classname="t" name="skip"><skipped message="later"/></testcase>
      <testcase classname="t" name="err" file="t.py" line="9"><error message="fixture broke">boom</error></testcase>
      <testcase classname="t" name="neq"><failure message="AssertionError: assert 'a' == 'b'">t.py:4: AssertionError</failure></testcase>
    </testsuite></testsuites>"""
    counts = parse_junit(xml)
    assert (counts.passed, counts.skipped, counts.errors, counts.failed) == (1, 1, 1, 1)
    err, neq = counts.failures
    assert (err.kind, err.location) == ("error", "t.py:10")
    assert (neq.kind, neq.expected, neq.actual, neq.location) == ("failure", "'b'", "'a'", "t.py:4")
