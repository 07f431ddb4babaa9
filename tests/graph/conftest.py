"""Fixtures for the loop: run a scripted task in-process against real Postgres and the real
workspace MCP server, and inspect what the run left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.task import RunSettings, Task

READ_NOTES = {"name": "workspace__read_file", "args": {"path": "notes.md"}}
PLAN_ONE_STEP = {
    "content": {"steps": [{"id": "s1", "description": "answer from the notes"}], "blocked": None},
    "usage": {"input_tokens": 100, "output_tokens": 20},
}
"""One step that promises no tool call: whatever the actor calls, the judge checks the answer."""
PLAN_READ_NOTES = {
    "content": {"steps": [{"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"], "args": {"path": "notes.md"}}],
                "blocked": None},
    "usage": {"input_tokens": 100, "output_tokens": 20},
}
"""One step done only by a verified read of notes.md made for it."""
JUDGE_PASS = {"content": {"passed": True, "failures": []}, "usage": {"input_tokens": 50, "output_tokens": 5}}
CRITIC_FAIL = {
    "content": {"scores": {"correctness": 0.5, "completeness": 0.5, "coherence": 0.9, "safety": 1}, "defects": [{"problem": "incomplete"}]},
    "usage": {"input_tokens": 50, "output_tokens": 5},
}
CRITIC_PASS = {
    "content": {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []},
    "usage": {"input_tokens": 50, "output_tokens": 5},
}


def step(content: Any = "", calls: list[dict[str, Any]] | None = None, tokens: tuple[int, int] = (100, 10)) -> dict[str, Any]:
    """One scripted model step."""
    return {"content": content, "tool_calls": calls or [], "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


RunScript = Callable[..., Awaitable[RunReport]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    return root


@pytest.fixture
async def runner(db_url: str) -> Runner:
    async with Runner(db_url) as live:
        yield live


def phases_asked(roles: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """A script that scripts the planner or the critic is about those phases: its run asks for them."""
    return {phase: "always" for role, phase in (("planner", "planning"), ("critic", "critique")) if roles.get(role)}


def phase_flags(roles: dict[str, list[dict[str, Any]]]) -> list[str]:
    """`phases_asked` as `run`'s flags."""
    return [arg for phase, mode in phases_asked(roles).items() for arg in (f"--{phase}", mode)]


@pytest.fixture
def run_script(runner: Runner, workspace: Path, tmp_path: Path) -> RunScript:
    """`await run_script(roles, task={...}, **settings)`: run a task against a script of `roles`.

    A script that scripts the planner or the critic is about those phases: its run asks for them
    (`planning`, `critique` "always") unless the test chooses. Which phases a run enters by
    itself is tested apart, with scripts that leave them out (test_proportion.py)."""

    async def run(roles: dict[str, list[dict[str, Any]]], *, task: dict[str, Any] | None = None, **settings: Any) -> RunReport:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
        chosen = Task.model_validate({"goal": "Summarize notes.md", **(task or {})})
        chosen_settings = {"model": "scripted", "script": str(script), "workspace_root": str(workspace), **phases_asked(roles), **settings}
        return await runner.start(chosen, RunSettings(**chosen_settings))

    return run
