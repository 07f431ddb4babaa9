"""With LANGSMITH_TRACING=true a run arrives in LangSmith as one tree, however many processes drove
it: the run, one child per drive, its phases, the model calls with their role, each tool call as a
`tool` run, approvals and interrupts as events. Off (the default), nothing is sent. An endpoint that
errors or hangs costs the run nothing. The LangSmith API is a loopback stand-in (langsmith_capture.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.langsmith_capture import Capture, langsmith_stand_in
from tests.graph.test_cli import _env, boundloop

MOVE = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "old.md"}}


def _children(capture, parent: dict) -> list[dict]:
    return [run for run in capture.runs.values() if str(run.get("parent_run_id")) == str(parent["id"])]


@contextmanager
def _waiting_run(db_url, workspace, tmp_path, thread_id: str) -> Iterator[tuple[Capture, dict[str, str], tuple[str, ...]]]:
    """A traced `boundloop run` (drive 1) stopped at the approval of its move; yields the stand-in's
    capture, the environment and the common arguments, with the stand-in still up."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {
        "planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES, MOVE]), step("done")], "critic": [CRITIC_PASS]}}))
    with langsmith_stand_in() as (url, capture):
        env = _env(LANGSMITH_TRACING="true", LANGSMITH_ENDPOINT=url, LANGSMITH_API_KEY="test-key")
        common = ("--database-url", db_url, "--json")
        started = boundloop("run", "Summarize notes.md", "--profile", "coding_assistant", "--model", "scripted", "--script", str(script),
                            "--workspace", str(workspace), "--thread", thread_id, "--planning", "always", *common, env=env)
        assert json.loads(started.stdout)["status"] == "CONFIRM_REQUIRED", started.stderr
        yield capture, env, common


def test_a_run_is_one_langsmith_tree_with_tool_runs_and_events(db_url, workspace, tmp_path):
    with _waiting_run(db_url, workspace, tmp_path, "ls-run") as (capture, env, common):
        (waiting,) = capture.by_name("boundloop.run")
        assert not waiting.get("end_time"), "a run waiting for a human is not over: its root stays open"
        finished = boundloop("approve", "ls-run", "a0.1", "--as", "ana", *common, env=env)
        assert json.loads(finished.stdout)["status"] == "SUCCESS", finished.stderr

    (root,) = capture.by_name("boundloop.run")  # the approval resumed the run in another process: still one tree
    assert root.get("parent_run_id") is None and root["run_type"] == "chain" and root["end_time"]
    assert capture.posts[root["id"]] == 1, "the resumed drive must not create the root again"
    metadata = root["extra"]["metadata"]
    assert metadata["run_id"] == "ls-run" and metadata["profile"] == "coding_assistant" and metadata["terminal_code"] == "SUCCESS"
    assert metadata["graph_version"] and metadata["policy_hash"] and metadata["budget_limits"]["tool_calls"]
    assert "confidence" in metadata and {"profile:coding_assistant", "status:SUCCESS"} <= set(root["tags"])
    assert {run["trace_id"] for run in capture.runs.values()} == {root["id"]}
    assert all(run["dotted_order"].startswith(root["dotted_order"]) for run in capture.runs.values())

    first, second = sorted(_children(capture, root), key=lambda run: run["start_time"])
    assert first["name"] == second["name"] == "boundloop.drive"
    assert first["extra"]["metadata"]["terminal_code"] == "waiting" and "status:waiting" in first["tags"]
    assert second["extra"]["metadata"]["terminal_code"] == "SUCCESS" and "status:SUCCESS" in second["tags"]

    phases = {run["name"] for drive in (first, second) for graph_run in _children(capture, drive) for run in _children(capture, graph_run)}
    assert {"intake", "plan", "validate_plan", "act", "execute", "approve", "verify", "finalize"} <= phases
    models = [run for run in capture.runs.values() if run["run_type"] == "llm"]
    assert {run["extra"]["metadata"]["boundloop_role"] for run in models} >= {"planner", "actor", "critic"}

    tools = {run["extra"]["metadata"]["tool"]: run for run in capture.runs.values() if run["run_type"] == "tool"}
    read, move = tools["workspace__read_file"], tools["workspace__move_file"]
    assert capture.runs[str(read["parent_run_id"])]["name"] == "execute"
    assert {key: read["extra"]["metadata"][key] for key in ("server", "decision", "outcome", "ledger_key")} == {
        "server": "workspace", "decision": "allow", "outcome": "ok", "ledger_key": None}
    assert read["extra"]["metadata"]["rule"]
    assert move["extra"]["metadata"]["decision"] == "approved" and move["extra"]["metadata"]["ledger_key"].startswith("bl-")
    assert move["extra"]["metadata"]["outcome"] == "ok" and move["dotted_order"].startswith(second["dotted_order"])
    assert move["extra"]["metadata"]["policy_hash"] == metadata["policy_hash"] and move["extra"]["metadata"]["budget_limits"]["tool_calls"]
    assert move["extra"]["metadata"]["budget_used"]["model_turns"] >= 2  # the planner's and the actor's turns before it
    assert metadata["budget_used"]["tool_calls"] == 2 and metadata["budget_used"]["model_turns"] >= 3

    events = [(run["name"], event["name"]) for run in capture.runs.values() for event in run.get("events") or [] if event.get("name") != "start"]
    assert ("approve", "interrupt") in events and ("approve", "tool_approval") in events


def test_a_call_the_gate_denies_is_a_tool_run_too(db_url, workspace, tmp_path):
    """Never sent, the denied call is still in the tree, as a `tool` run with its decision and rule."""
    script, policy = tmp_path / "script.json", tmp_path / "policy.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {"actor": [step(calls=[READ_NOTES, MOVE]), step("done")]}}))
    policy.write_text(json.dumps({"rules": [{"id": "no-moves", "action": "deny", "tool": "move_file"}]}))
    with langsmith_stand_in() as (url, capture):
        env = _env(LANGSMITH_TRACING="true", LANGSMITH_ENDPOINT=url, LANGSMITH_API_KEY="test-key")
        done = boundloop("run", "Summarize notes.md", "--model", "scripted", "--script", str(script), "--workspace", str(workspace),
                         "--policy", str(policy), "--unattended", "--thread", "ls-denied", "--database-url", db_url, "--json", env=env)
        assert json.loads(done.stdout)["status"], done.stderr
    tools = {run["extra"]["metadata"]["tool"]: run["extra"]["metadata"] for run in capture.runs.values() if run["run_type"] == "tool"}
    assert tools["workspace__move_file"]["decision"] == "denied" and tools["workspace__move_file"]["outcome"] == "denied"
    assert tools["workspace__move_file"]["rule"] == "rule:no-moves" and tools["workspace__move_file"]["policy_hash"]
    assert tools["workspace__read_file"]["outcome"] == "ok"


async def test_tracing_is_off_by_default_and_sends_nothing(run_script, monkeypatch):
    with langsmith_stand_in() as (url, capture):
        monkeypatch.setenv("LANGSMITH_ENDPOINT", url)
        monkeypatch.setenv("LANGSMITH_API_KEY", "test-key")
        done = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("done")], "critic": [CRITIC_PASS]})
        assert done.status == "SUCCESS"
    assert capture.requests == []


def _drive_then_fail(db_url, workspace, tmp_path, fault: str) -> tuple[subprocess.CompletedProcess[str], Capture]:
    """Drive 1 reaches LangSmith and stops at an approval; then the endpoint fails with `fault` and
    `boundloop approve` drives the run to its end. Returns (the approve process, capture)."""
    with _waiting_run(db_url, workspace, tmp_path, f"ls-{fault}") as (capture, env, common):
        capture.fault = fault
        finished = boundloop("approve", f"ls-{fault}", "a0.1", "--as", "ana", *common, env=env)
    return finished, capture


@pytest.mark.parametrize("fault", ["error", "hang"])
def test_a_failing_langsmith_endpoint_between_drives_costs_the_run_nothing(db_url, workspace, tmp_path, fault):
    """The run ends as it would untraced, without waiting for LangSmith (a hung endpoint answers
    nothing until the stand-in stops, after the approve process has exited), and says nothing about
    tracing on stdout; LangSmith keeps what the first drive sent: the root still open (its end never
    arrived), the first drive ended `waiting`, nothing of the second."""
    finished, capture = _drive_then_fail(db_url, workspace, tmp_path, fault)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["status"] == "SUCCESS"
    assert capture.refused >= 1  # the second drive did try to send
    assert "Traceback" not in finished.stderr
    (root,) = capture.by_name("boundloop.run")
    assert not root.get("end_time") and "terminal_code" not in root["extra"]["metadata"]
    (drive,) = capture.by_name("boundloop.drive")
    assert drive["extra"]["metadata"]["terminal_code"] == "waiting"
    assert not [run for run in capture.runs.values() if run["run_type"] == "tool" and run["extra"]["metadata"]["tool"] == "workspace__move_file"]
