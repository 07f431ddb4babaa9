"""Tool servers warmed while the runner opens: the run's intake uses them, starts nothing twice,
reports a warm start that failed without trying again, and never uses servers warmed for other
settings."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from boundloop.graph.core.status import Terminal
from boundloop.graph.run.runner import Runner, new_thread_id
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import READ_NOTES, step, workspace  # noqa: F401  (fixture)

ROLES = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}


def counted_servers(tmp_path: Path, root: Path, starts: Path, *, broken: bool = False) -> str:
    """A servers file whose workspace server notes each start in `starts` (a broken one exits at once)."""
    serve = "exit 3" if broken else f'exec {sys.executable} -m boundloop.mcp_servers.workspace --root "{root}"'
    entry = {"command": "/bin/sh", "args": ["-c", f'echo started >> "{starts}"; {serve}'], "root": str(root), "trusted": True, "protocol": "auto"}
    path = tmp_path / f"servers-{starts.name}.json"
    path.write_text(json.dumps({"mcpServers": {"workspace": entry}}))
    return str(path)


def settings(tmp_path: Path, servers: str) -> RunSettings:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": ROLES}))
    return RunSettings(model="scripted", script=str(script), servers=servers, unattended=True)


def starts_of(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def run_warm(db_url: str, warm: tuple[str, RunSettings], thread: str, chosen: RunSettings) -> Any:
    async with Runner(db_url, warm=warm) as runner:
        return await runner.start(Task(goal="Summarize notes.md"), chosen, thread_id=thread)


async def test_a_warmed_server_is_the_one_the_run_uses(db_url, workspace, tmp_path):
    starts = tmp_path / "starts"
    chosen = settings(tmp_path, counted_servers(tmp_path, workspace, starts))
    thread = new_thread_id()
    async with Runner(db_url, warm=(thread, chosen)) as runner:
        for _ in range(200):  # started before any run was asked for
            if starts_of(starts):
                break
            await asyncio.sleep(0.05)
        assert starts_of(starts) == 1
        report = await runner.start(Task(goal="Summarize notes.md"), chosen, thread_id=thread)
    assert report.status == Terminal.SUCCESS
    assert starts_of(starts) == 1


async def test_a_warm_start_that_failed_is_reported_by_intake_without_starting_again(db_url, workspace, tmp_path):
    """As many attempts to start the broken server as a run that was not warmed makes (the bridge's
    own handshake fallback included), and the same ending."""
    cold_starts, warm_starts = tmp_path / "cold-starts", tmp_path / "warm-starts"
    async with Runner(db_url) as runner:
        cold = await runner.start(Task(goal="Summarize notes.md"), settings(tmp_path, counted_servers(tmp_path, workspace, cold_starts, broken=True)))
    chosen = settings(tmp_path, counted_servers(tmp_path, workspace, warm_starts, broken=True))
    thread = new_thread_id()
    warm = await run_warm(db_url, (thread, chosen), thread, chosen)
    assert cold.status == warm.status == Terminal.UNAVAILABLE_DEP
    assert warm.values["ending"]["reason"].startswith("tool servers unavailable")
    assert starts_of(warm_starts) == starts_of(cold_starts) >= 1


async def test_servers_warmed_for_other_settings_are_not_the_runs(db_url, workspace, tmp_path):
    """Warmed on another root (say, a caller that changed its mind): the run gets its own root's server."""
    other = tmp_path / "other"
    other.mkdir()
    warmed_starts, run_starts = tmp_path / "warmed-starts", tmp_path / "run-starts"
    warmed = settings(tmp_path, counted_servers(tmp_path, other, warmed_starts))
    chosen = settings(tmp_path, counted_servers(tmp_path, workspace, run_starts))
    thread = new_thread_id()
    report = await run_warm(db_url, (thread, warmed), thread, chosen)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert "Ana" in json.dumps(report.values["observations"])  # read from the run's own workspace
    assert (starts_of(warmed_starts), starts_of(run_starts)) == (1, 1)
