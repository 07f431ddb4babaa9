"""Durability around a run: resubmission, one executor per run, and halting on Ctrl-C / SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from boundloop.graph.core.errors import RunExists
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, _wait_for_node, boundloop

SCRIPT = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("done")], "critic": [CRITIC_PASS]}


async def test_resubmitting_a_committed_task_returns_its_result_without_running_anything(run_script, runner, tmp_path, workspace):
    first = await run_script(SCRIPT)
    assert first.status == Terminal.SUCCESS
    events = len(await runner.trace(first.thread_id))
    settings = RunSettings(model="scripted", script=str(tmp_path / "script.json"), workspace_root=str(workspace))
    again = await runner.start(Task(goal="Summarize notes.md"), settings, thread_id=first.thread_id)
    assert again.status == Terminal.SUCCESS and again.result["sha256"] == first.result["sha256"]
    assert len(await runner.trace(first.thread_id)) == events
    with pytest.raises(RunExists, match=f"run {first.thread_id} already exists with status SUCCESS"):
        await runner.start(Task(goal="Something else"), settings, thread_id=first.thread_id)


def test_two_processes_resuming_the_same_run_at_once_only_one_executes(db_url, tmp_path):
    _, servers, script = _crash_task(tmp_path, "shared", slow_s=60)  # longer than a loaded machine takes to start the second resumer
    crashed = subprocess.run([BOUNDLOOP, *_run_args(servers, script, "shared", db_url)], env=_env(BOUNDLOOP_CRASH_AT="enter:act#2"),
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL
    first = subprocess.Popen([BOUNDLOOP, "resume", "shared", "--json", "--database-url", db_url], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_node(db_url, "shared", "act", count=2, process=first)  # the first resumer is inside the slow call
    second = boundloop("resume", "shared", "--json", "--database-url", db_url)
    assert second.returncode == 2
    assert "run shared is active elsewhere: another process holds its lease" in second.stderr
    first.send_signal(signal.SIGINT)  # no need to wait out the slow call: the winner stops at its next safe point
    out, err = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGINT, err
    assert json.loads(out)["status"] == Terminal.USER_CANCEL


def test_ctrl_c_stops_at_the_next_safe_point_and_the_run_resumes(db_url, tmp_path):
    _, servers, script = _crash_task(tmp_path, "halted")
    process = subprocess.Popen([BOUNDLOOP, *_run_args(servers, script, "halted", db_url)], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_node(db_url, "halted", "act", count=2, process=process)  # the slow call is running
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGINT, err
    assert "halting: the call in flight is cancelled" in err
    assert json.loads(out)["status"] == Terminal.USER_CANCEL
    listed = {row["thread_id"]: row["status"] for row in json.loads(boundloop("runs", "--json", "--database-url", db_url).stdout)}
    assert listed["halted"] == Terminal.USER_CANCEL
    resumed = boundloop("resume", "halted", "--json", "--database-url", db_url)
    assert json.loads(resumed.stdout)["status"] == "SUCCESS"


def test_a_second_ctrl_c_exits_at_once_and_leaves_a_resumable_run(db_url, tmp_path):
    workspace, servers, script = _crash_task(tmp_path, "twice")
    process = subprocess.Popen([BOUNDLOOP, *_run_args(servers, script, "twice", db_url)], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_node(db_url, "twice", "act", count=2, process=process)
    process.send_signal(signal.SIGINT)
    assert "halting: the call in flight is cancelled" in process.stderr.readline()  # the first one was handled
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)
    assert process.returncode == 130
    resumed = boundloop("resume", "twice", "--json", "--database-url", db_url)
    assert json.loads(resumed.stdout)["status"] == "SUCCESS"
    assert (workspace / "out.md").read_text() == "result v1\n"
