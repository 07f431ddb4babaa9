"""Ctrl-C cancels the model or tool call in flight and halts at once with USER_CANCEL.

Real `boundloop` processes: one hangs inside a side-effecting MCP call (the pager server holds
its first page forever), one inside a model call (a local OpenAI-compatible endpoint that never
answers its first actor request). One Ctrl-C must end either at once, not when the call returns,
and the run must resume: the cut-off page is re-sent with its idempotency key and pages once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, step
from tests.graph.fake_openai import FakeOpenAI
from tests.graph.test_cli import BOUNDLOOP, _env, _wait_for_node, boundloop

PAGER = Path(__file__).parents[1] / "tools" / "servers" / "pager_server.py"
HALT_WITHIN_S = 20
"""Far below the 30 s tool timeout and the model client's 600 s: only a real cancel ends the process in time."""


def _halt(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=HALT_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError(f"one Ctrl-C did not halt the run within {HALT_WITHIN_S} s: it waited for the call in flight")


def test_ctrl_c_cancels_a_hung_side_effecting_call_and_the_resumed_run_pages_once(db_url, tmp_path):
    pages, marker = tmp_path / "pages.jsonl", tmp_path / "hung"
    args = [str(PAGER), "--pages", str(pages), "--die-once", "hang", "--marker", str(marker)]
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {"pager": {"command": sys.executable, "args": args, "trusted": True}}}))
    (tmp_path / "policy.json").write_text(json.dumps({"rules": [{"id": "t.pager", "action": "allow", "server": "pager", "tool": "*", "reason": "test"}]}))
    plan = {"content": {"steps": [{"id": "page", "description": "Page", "tools": ["pager__page"]}], "blocked": None}}
    page = {"name": "pager__page", "args": {"oncall": "ana", "message": "db-2 disk full"}}
    roles = {"planner": [plan], "actor": [step(calls=[page]), step("ana was paged")], "critic": [CRITIC_PASS]}
    (tmp_path / "script.json").write_text(json.dumps({"model_id": "scripted-cancel", "roles": roles}))
    argv = ["run", "page ana", "--model", "scripted", "--script", str(tmp_path / "script.json"), "--servers", str(tmp_path / "servers.json"),
            "--policy", str(tmp_path / "policy.json"), "--thread", "hung-tool", "--json", "--database-url", db_url]
    process = subprocess.Popen([BOUNDLOOP, *argv], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: marker.exists(), process)  # the page is in flight and hangs
        out, err = _halt(process)
    finally:
        process.kill()
    assert process.returncode == 130, err  # halted by SIGINT: 128 + 2, resumable
    assert json.loads(out)["status"] == Terminal.USER_CANCEL
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status FROM boundloop_ledger WHERE thread_id = 'hung-tool'").fetchall() == [("INTENT",)]
    listed = {row["thread_id"]: row["status"] for row in json.loads(boundloop("runs", "--json", "--database-url", db_url).stdout)}
    assert listed["hung-tool"] == Terminal.USER_CANCEL
    assert not pages.exists()
    _assert_halt_checkpointed(db_url, "hung-tool", next_node="execute")

    resumed = boundloop("resume", "hung-tool", "--json", "--database-url", db_url, cwd=tmp_path)
    assert json.loads(resumed.stdout)["status"] == Terminal.SUCCESS, resumed.stderr
    assert len(pages.read_text().splitlines()) == 1
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status FROM boundloop_ledger WHERE thread_id = 'hung-tool'").fetchall() == [("COMPLETE",)]


@pytest.fixture
def hanging_model() -> Iterator[str]:
    """An OpenAI-compatible endpoint whose first actor request never gets an answer; the rest do."""
    with FakeOpenAI(faults={"actor": [{"hang_s": 300}]}) as fake:
        yield fake.base_url


def test_ctrl_c_cancels_a_hung_model_call_and_the_run_resumes(db_url, tmp_path, hanging_model):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    env = _env(OPENAI_API_KEY="sk-test-key")
    argv = ["run", "Summarize notes.md", "--model", "gpt-4o-mini", "--base-url", hanging_model, "--workspace", str(workspace),
            "--thread", "hung-model", "--json", "--database-url", db_url]
    process = subprocess.Popen([BOUNDLOOP, *argv], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_node(db_url, "hung-model", "validate_plan", count=1, process=process)
        time.sleep(0.5)  # the actor's request is sent and hangs
        out, err = _halt(process)
    finally:
        process.kill()
    assert json.loads(out)["status"] == Terminal.USER_CANCEL, err
    _assert_halt_checkpointed(db_url, "hung-model", next_node="act")
    resumed = subprocess.run([BOUNDLOOP, "resume", "hung-model", "--json", "--database-url", db_url], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert json.loads(resumed.stdout)["status"] == Terminal.SUCCESS, resumed.stderr


def _assert_halt_checkpointed(db_url: str, thread_id: str, *, next_node: str) -> None:
    """The cut-off step stays pending, and the thread's own state says USER_CANCEL with its halt record."""

    async def snapshot() -> Any:
        async with Runner(db_url) as runner:
            return await runner.graph.aget_state({"configurable": {"thread_id": thread_id}})

    halted = asyncio.run(snapshot())
    assert halted.next == (next_node,)
    assert halted.values["status"]["terminal"] == Terminal.USER_CANCEL
    assert (halted.values["result"]["kind"], halted.values["result"]["code"]) == ("halt", Terminal.USER_CANCEL)


def _wait_for(condition: Any, process: subprocess.Popen[str], within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended before the call hung: {process.communicate()}"
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"the call did not start within {within_s} s")
