"""The `boundloop` command end to end, in real subprocesses: the demo, bad input, kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
PROBE_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


def boundloop(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BOUNDLOOP, *args], capture_output=True, text=True, timeout=180, env=env or _env(), cwd=cwd)


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL"))}
    return {**env, **extra}


def test_the_demo_succeeds_offline_and_its_run_is_listed_and_shown(db_url, tmp_path):
    """`boundloop demo` plans, fails verification once, repairs and commits; `runs` and `show` find it."""
    demo = boundloop("demo", "--json", "--database-url", db_url, env=_env(BOUNDLOOP_HOME=str(tmp_path)))
    assert demo.returncode == 0, demo.stderr
    report = json.loads(demo.stdout)
    assert report["status"] == "SUCCESS"
    assert report["usage"]["repairs"] == 1 and report["usage"]["side_effects"] == 2
    summary = (tmp_path / "workspaces" / report["run_id"] / "summary.md").read_text()
    assert "Chloe: book the retro room" in summary
    listed = json.loads(boundloop("runs", "--json", "--database-url", db_url).stdout)
    assert [(row["thread_id"], row["status"]) for row in listed] == [(report["run_id"], "SUCCESS")]
    shown = json.loads(boundloop("show", report["run_id"], "--json", "--database-url", db_url).stdout)
    nodes = [event["node"] for event in shown["trace"]]
    assert nodes[0] == "intake" and nodes[-1] == "finalize" and nodes.count("finalize") == 1
    assert nodes.count("repair") == 1


def test_demo_and_run_write_nothing_in_the_current_directory(db_url, tmp_path):
    """The demo's workspace and the MCP servers' stderr logs go to the state directory (BOUNDLOOP_HOME)."""
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    demo = boundloop("demo", "--json", "--database-url", db_url, env=_env(BOUNDLOOP_HOME=str(home)), cwd=cwd)
    assert json.loads(demo.stdout)["status"] == "SUCCESS", demo.stderr
    _, servers, script = _crash_task(tmp_path, "elsewhere", slow_s=0)
    run = boundloop(*_run_args(servers, script, "elsewhere", db_url), env=_env(BOUNDLOOP_HOME=str(home)), cwd=cwd)
    assert json.loads(run.stdout)["status"] == "SUCCESS", run.stderr
    assert list(cwd.iterdir()) == []
    assert (home / "workspaces" / json.loads(demo.stdout)["run_id"] / "summary.md").is_file()
    assert {log.name.split(".")[0] for log in (home / "logs").iterdir()} == {"workspace", "probe"}


def test_run_without_an_api_key_says_how_to_configure_one(db_url):
    result = boundloop("run", "do something", "--database-url", db_url)
    assert result.returncode == 2
    assert "No API key for model 'gpt-4o-mini': set OPENAI_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x", "--budget", "tool_calls"], "--budget 'tool_calls' is not NAME=VALUE"),
        (["run", "x", "--budget", "bogus=3", "--model", "scripted", "--script", "{script}"], "unknown budget dimension(s) ['bogus']"),
        (["run", "x", "--model", "scripted", "--script", "{bad_script}"], "is not valid JSON (line 1, column 2"),
        (["run", "--task", "{bad_task}", "--model", "scripted", "--script", "{script}"], "task: goal: String should have at least 1 character"),
        (["run", "x", "--profile", "astronaut", "--model", "scripted", "--script", "{script}"], "task: profile: Input should be"),
        (["show", "run-nope"], "no run 'run-nope' in this database"),
        (["run", "x", "--model", "scripted", "--script", "{script}", "--servers", "{bad_servers}"], "mcpServers.files has both 'command' and 'url'"),
    ],
)
def test_bad_input_gets_one_clear_message_and_no_traceback(db_url, tmp_path, args, message):
    files = {"script": tmp_path / "s.json", "bad_script": tmp_path / "bad.json", "bad_task": tmp_path / "task.json",
             "bad_servers": tmp_path / "servers.json"}
    files["bad_servers"].write_text(json.dumps({"mcpServers": {"files": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}}))
    files["script"].write_text(json.dumps({"roles": {}}))
    files["bad_script"].write_text("{oops")
    files["bad_task"].write_text(json.dumps({"goal": ""}))
    argv = [arg.format(**files) for arg in args]
    result = boundloop(*argv, "--database-url", db_url)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_database_is_named_with_the_fix(tmp_path):
    result = boundloop("runs", "--database-url", "postgresql://postgres@127.0.0.1:1/nowhere")
    assert result.returncode == 2
    assert "127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr


def _crash_task(tmp_path: Path, name: str, slow_s: float = 2.5) -> tuple[Path, Path, Path]:
    """A task whose second tool call is slow, so a kill can land while it runs."""
    workspace = tmp_path / name
    workspace.mkdir()
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "probe": {"command": sys.executable, "args": [str(PROBE_SERVER)], "trusted": True},
    }}
    write = {"name": "workspace__write_file", "args": {"path": "out.md", "content": "result v1\n"}}
    roles = {
        "planner": [PLAN_ONE_STEP],
        "actor": [step(calls=[write]), step(calls=[{"name": "probe__slow", "args": {"seconds": slow_s}}]),
                  step(calls=[{"name": "workspace__read_file", "args": {"path": "out.md"}}]), step("out.md holds result v1")],
        "critic": [CRITIC_PASS],
    }
    (tmp_path / f"{name}.servers.json").write_text(json.dumps(servers))
    (tmp_path / f"{name}.script.json").write_text(json.dumps({"model_id": "scripted-crash", "roles": roles}))
    return workspace, tmp_path / f"{name}.servers.json", tmp_path / f"{name}.script.json"


def _run_args(servers: Path, script: Path, thread: str, db_url: str) -> list[str]:
    return ["run", "write out.md", "--model", "scripted", "--script", str(script), "--servers", str(servers),
            "--thread", thread, "--json", "--database-url", db_url]


def test_a_run_killed_mid_loop_resumes_in_a_new_process_to_the_same_result(db_url, tmp_path):
    """SIGKILL while a tool runs; `boundloop resume` in a fresh process ends exactly as an uninterrupted run."""
    _, servers, script = _crash_task(tmp_path, "straight")
    straight = json.loads(boundloop(*_run_args(servers, script, "straight", db_url)).stdout)
    assert straight["status"] == "SUCCESS"

    workspace, servers, script = _crash_task(tmp_path, "killed")
    process = subprocess.Popen([BOUNDLOOP, *_run_args(servers, script, "killed", db_url)], env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_node(db_url, "killed", "act", count=2, process=process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)

    resumed = boundloop("resume", "killed", "--json", "--database-url", db_url)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["status"] == straight["status"]
    assert report["result"]["sha256"] == straight["result"]["sha256"]
    spent = {name: value for name, value in report["usage"].items() if name != "wall_clock_s"}
    assert spent == {name: value for name, value in straight["usage"].items() if name != "wall_clock_s"}  # every counter, rebuilt from the steps' deltas
    assert (workspace / "out.md").read_text() == "result v1\n"


def _wait_for_node(db_url: str, thread: str, node: str, *, count: int, process: subprocess.Popen, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            assert process.poll() is None, "the run ended before the kill point"
            try:
                seen = conn.execute("SELECT count(*) FROM boundloop_trace WHERE thread_id = %s AND kind = 'node' AND node = %s", (thread, node)).fetchone()[0]
            except psycopg.errors.UndefinedTable:
                seen = 0
            if seen >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"node {node} did not run {count} times within {within_s}s")
