"""`boundloop eval` as a gate, through the real command in a subprocess: every kind of miss (a
threshold, an expected ending, a golden-path deviation, a replay that differs) exits 5 with one
line per miss, and a suite with none exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from boundloop.graph.core.status import Exit

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
ONCE_SERVER = Path(__file__).parent / "once_server.py"
NOTES = {"notes.md": "Action items:\n- Ana: publish the notes\n"}
TASK = {"goal": "Summarize notes.md", "acceptance_criteria": ["the answer names Ana's action item"]}
PATH = "intake plan validate_plan act execute act critique verify weigh commit finalize".split()
"""The judge and the critic in one step (nodes of a step in name order), then weigh."""


def step(content: Any = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"content": content, "tool_calls": calls or [], "usage": {"input_tokens": 100, "output_tokens": 10}}


PLAN_READ = step({"steps": [{"id": "s1", "description": "read", "tools": ["workspace__read_file"], "args": {"path": "notes.md"}}], "blocked": None})
PLAN_CHECK_IN = step({"steps": [{"id": "s1", "description": "check in"}], "blocked": None})
JUDGE = step({"passed": True, "failures": []})
CRITIC = step({"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []})
ANSWER = step("Ana publishes the notes.")


def read_scenario(**changes: Any) -> dict[str, Any]:
    """A golden run: plan a read, read notes.md, answer, pass the goal check and the critic (11 steps)."""
    roles = {"planner": [PLAN_READ], "actor": [step("", [{"name": "workspace__read_file", "args": {"path": "notes.md"}}]), ANSWER],
             "judge": [JUDGE], "critic": [CRITIC]}
    scenario = {"name": "read", "mode": "golden", "task": TASK, "workspace": NOTES, "script": {"model_id": "m", "roles": roles},
                "expect": {"terminal": "SUCCESS", "golden": PATH}}
    return {**scenario, **changes}


def suite(scenario: dict[str, Any], thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "gate", "settings": {"planning": "always", "critique": "always"},
            "thresholds": thresholds or {"trajectory_validity": {"min": 1.0}}, "scenarios": [scenario]}


def replay_scenario(state: Path) -> dict[str, Any]:
    """Run twice; its server fails the first call it ever gets (remembered in `state`), so the
    second run's call ends ok where the first run's failed."""
    roles = {"planner": [PLAN_CHECK_IN], "actor": [step("", [{"name": "once__check_in", "args": {}}]), ANSWER],
             "judge": [JUDGE], "critic": [CRITIC]}
    return {"name": "twice", "mode": "replay", "task": TASK, "workspace": NOTES, "script": {"model_id": "m", "roles": roles},
            "servers": {"once": {"command": "{python}", "args": [str(ONCE_SERVER), "--state", str(state)], "trusted": True}},
            "replay": True, "expect": {"terminal": "SUCCESS"}}


def boundloop_eval(suite_file: Path, db_url: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL"))}
    return subprocess.run([BOUNDLOOP, "eval", str(suite_file), "--database-url", db_url],
                          capture_output=True, text=True, timeout=300, env=env)


def missed_lines(stderr: str) -> list[str]:
    return [line.removeprefix("missed: ") for line in stderr.splitlines() if line.startswith("missed: ")]


@pytest.mark.parametrize("kind", ["none", "threshold", "ending", "golden", "replay"])
def test_every_kind_of_miss_exits_5_with_one_line_each(kind: str, db_url: str, tmp_path: Path) -> None:
    expected: dict[str, tuple[dict[str, Any], list[str]]] = {
        "none": (suite(read_scenario()), []),
        "threshold": (suite(read_scenario(), {"trajectory_efficiency": {"max": 0.5}}),
                      ["trajectory_efficiency = 1 is above its maximum 0.5"]),
        "ending": (suite(read_scenario(expect={"terminal": "IMPOSSIBLE", "golden": PATH})),
                   ["scenario read: ended SUCCESS, expected IMPOSSIBLE"]),
        "golden": (suite(read_scenario(expect={"terminal": "SUCCESS", "golden": [node for node in PATH if node != "critique"]})),
                   ["scenario read: path deviates from the golden path at step 7: took critique, golden verify"]),
        "replay": (suite(replay_scenario(tmp_path)),
                   ["scenario twice: a second run differed: call 1: once__check_in ended ok, in the first run tool_error"]),
    }
    document, lines = expected[kind]
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(document))
    result = boundloop_eval(suite_file, db_url)
    assert result.returncode == (Exit.SUCCESS if not lines else Exit.QUALITY), result.stdout + result.stderr
    assert missed_lines(result.stderr) == lines, result.stderr
    assert ("every threshold met" in result.stdout) == (not lines)
