"""A test check's failures reach the repair prompt as located, structured records (name, expected, actual, file:line)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from boundloop.graph.trace.replay import replay_run
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, PLAN_ONE_STEP, step
from tests.mcp_servers.sandboxes import searchable_root
from tests.mcp_servers.test_sandbox_tests import CALC, needs_pytest

TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def write(path: str, content: str) -> dict:
    return {"name": "workspace__write_file", "args": {"path": path, "content": content}}


TESTS_PASS = {"name": "the tests pass", "kind": "test", "tool": "sandbox__run_tests", "args": {}, "expect_exit_code": 0}


def _servers(root: Path) -> dict:
    """The workspace and the sandbox servers, both rooted in `root`."""
    return {"mcpServers": {
        name: {"command": sys.executable, "args": ["-m", f"boundloop.mcp_servers.{name}", "--root", str(root)], "trusted": True}
        for name in ("workspace", "sandbox")
    }}


@needs_pytest
async def test_a_failing_pytest_run_puts_the_failure_location_in_the_repair_prompt(run_script, runner):
    with searchable_root() as root:
        root.chmod(0o777)  # the sandbox's user writes pytest's report here
        servers = _servers(root)
        report = await run_script(
            {"planner": [PLAN_ONE_STEP],
             "actor": [step(calls=[write("calc.py", CALC), write("test_calc.py", TESTS)]), step("written"),
                       step(calls=[write("calc.py", CALC.replace("a - b", "a + b"))]), step("fixed")],
             "critic": [CRITIC_FAIL, CRITIC_PASS]},
            task={"checks": [TESTS_PASS], "budget": {"side_effects": 10}, "targets": ["calc.py", "test_calc.py"]}, servers=servers,
            workspace_root=str(root),
        )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    repair = report.values["quality"]["repairs"][0]["problems"]
    assert repair[0] == "the tests pass: test_calc.test_add failed at test_calc.py:5: expected 3, got -1"
    feedback = [m.content for m in report.values["messages"] if m.type == "human" and "did not pass review" in m.content]
    assert "test_calc.py:5" in feedback[0]
    located = json.loads(feedback[0].split("Diagnosis (JSON):\n", 1)[1])[0]
    assert {key: located[key] for key in ("cause", "location", "expected", "actual", "strategy")} == {
        "cause": "LOGIC_ERROR", "location": "test_calc.py:5", "expected": "3", "actual": "-1", "strategy": "MINIMAL_EDIT"}
    assert report.values["quality"]["verification"]["tests"] == {"passed": 1, "failed": 0, "errors": 0}
    replayed = await replay_run(runner.pool, report.thread_id, runner.graph)  # each check verify ran carries its permission decision
    assert replayed.valid, replayed.problems


@needs_pytest
async def test_a_failing_test_located_in_a_file_a_step_wrote_is_traced_to_that_step(run_script):
    """calc.py (written by s1) raises inside the test that s2 wrote: the failure's location is
    calc.py:2, so the defect is traced to s1, the step whose call wrote that file — not to s2."""
    broken = "def add(a, b):\n    raise ValueError('not yet')\n"
    steps = [{"id": "s1", "description": "write calc.py", "tools": ["workspace__write_file"], "args": {"path": "calc.py"}},
             {"id": "s2", "description": "write its test", "tools": ["workspace__write_file"], "args": {"path": "test_calc.py"}, "depends_on": ["s1"]}]
    with searchable_root() as root:
        root.chmod(0o777)  # the sandbox's user writes pytest's report here
        servers = _servers(root)
        report = await run_script(
            {"planner": [step({"steps": steps})],
             "actor": [step(calls=[write("calc.py", broken)]), step(calls=[write("test_calc.py", TESTS)]), step("written"),
                       step(calls=[write("calc.py", CALC.replace("a - b", "a + b"))]), step("fixed")],
             "critic": [CRITIC_FAIL, CRITIC_PASS]},
            task={"checks": [TESTS_PASS], "budget": {"side_effects": 10}}, servers=servers, workspace_root=str(root),
            policy={"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]}, planning="always",
        )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    defect = report.values["quality"]["repairs"][0]["diagnosis"][0]
    assert (defect["location"], defect["step"], defect["trace"]) == ("calc.py:2", "s1", "s1 wrote calc.py")
