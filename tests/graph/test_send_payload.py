"""What a tool task's Send stores (graph/sends.py): the call, its tools' version and the settings and
budget that differ from their defaults — stored twice per call, so no copy of the defaults, the
whole usage or every breaker — and what the task gets back from it, also in a new process after a
kill between act's saved step and the call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import psycopg
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg.rows import dict_row

from graph import sends
from graph.runner import Runner
from graph.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, PLAN_READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, PROBE_SERVER, _env, boundloop

SERDE = JsonPlusSerializer()
READS = [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 100 + n}} for n in range(3)]


async def _stored_sends(runner: Runner, thread_id: str) -> list[tuple[int, Any]]:
    """(bytes, Send) of every task the run's routing sent, as the checkpoint writes keep them."""
    async with runner.pool.connection() as conn:
        rows = await (await conn.cursor(row_factory=dict_row).execute(
            "SELECT type, blob FROM checkpoint_writes WHERE thread_id = %s AND channel = '__pregel_tasks' ORDER BY checkpoint_id, idx",
            (thread_id,))).fetchall()
    return [(len(row["blob"]), SERDE.loads_typed((row["type"], row["blob"]))) for row in rows]


def _size(value: Any) -> int:
    return len(SERDE.dumps_typed(value)[1])


async def test_a_send_stores_its_call_and_tool_and_no_default_setting(run_script, runner, workspace, tmp_path):
    """Every Send of the run is its call and the two settings this run set, plus under 400 bytes (the
    tools' version, the profile, retries and the usage counters the task reads): with the settings'
    defaults, the budget, the whole usage, every circuit and the tool's definition it was over
    2,000 bytes more."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS), step("done")],
                               "critic": [CRITIC_PASS]})
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    stored = await _stored_sends(runner, report.thread_id)
    assert [send.node for _, send in stored] == ["execute"] * 3
    for size, send in stored:
        arg = send.arg
        assert arg["settings"] == {"script": str(tmp_path / "script.json"), "workspace_root": str(workspace)}
        assert arg["budget"] == {} and "breakers" not in arg  # the profile's budget; no model circuit yet
        assert arg["tools"] == {"version": report.values["tools"]["version"]}  # the pins are the run's state's
        assert size - _size(arg["call"]) - _size(arg["settings"]) < 400, arg


async def test_the_task_gets_the_runs_settings_and_budget_back_whole(run_script, runner):
    """Non-default settings and budget overrides come back exactly as the run's state holds them,
    defaults included; usage as the counters the task reads."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [step(calls=[READS[0]]), step("done")], "critic": [CRITIC_PASS]},
                              task={"budget": {"tool_calls": 7, "wall_clock_s": None}}, tool_timeout_s=12.5, max_result_chars=900,
                              user="ana", prices={"scripted-test": (1.0, 2.0)})
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    [(_, send)] = await _stored_sends(runner, report.thread_id)
    assert send.arg["budget"] == {"tool_calls": 7, "wall_clock_s": None}
    task = sends.unpack(send.arg)
    assert task["settings"] == report.values["settings"] and task["budget"] == report.values["budget"]
    assert task["settings"]["prices"] == {"scripted-test": [1.0, 2.0]} and task["settings"]["model_timeout_s"] == 120.0
    assert task["usage"]["model_turns"] == 2 and task["usage"]["tool_calls"] == 1 and task["usage"]["per_tool"] == {}


async def test_a_call_killed_after_acts_saved_step_runs_in_a_new_process_with_the_runs_settings(db_url, tmp_path):
    """Killed as the execute task starts (act's step, with the call's Send, saved; nothing sent): the
    resumed task, which has nothing but the stored Send, still times the call out after the run's
    tool_timeout_s (the default 30 s would let the 5 s call answer) and cuts its result at the
    run's max_result_chars."""
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"probe": {"command": sys.executable, "args": [str(PROBE_SERVER)], "trusted": True}}}))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"tool_timeout_s": 1.0, "max_result_chars": 200}))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"action": "allow", "server": "probe", "tool": "write_note", "id": "test:notes"}]}))
    script = tmp_path / "script.json"
    write = {"name": "probe__write_note", "args": {"note": "hello", "delay_s": 5.0}}
    script.write_text(json.dumps({"model_id": "scripted-sends", "roles": {
        "planner": [PLAN_ONE_STEP], "actor": [step(calls=[write]), step("noted")], "critic": [CRITIC_PASS]}}))
    args = ["run", "write a note", "--model", "scripted", "--script", str(script), "--servers", str(servers), "--config", str(config),
            "--policy", str(policy), "--workspace", str(tmp_path), "--thread", "sends", "--json", "--database-url", db_url]
    killed = subprocess.run([BOUNDLOOP, *args], env=_env(BOUNDLOOP_CRASH_AT="tool:before_intent#1"), capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM boundloop_ledger WHERE thread_id = 'sends'").fetchone()[0] == 0  # nothing sent
    resumed = boundloop("resume", "sends", "--json", "--database-url", db_url)
    assert resumed.returncode == 0, resumed.stderr
    async with Runner(db_url) as runner:
        report = await runner.report("sends")
    [observation] = [obs for obs in report.values["observations"] if obs["tool"] == "probe__write_note"]
    assert observation["detail"].startswith("timeout"), observation
    assert observation["latency_ms"] < 4_000
    assert observation["truncated"] and observation["chars"] > 200 and len(observation["excerpt"]) <= 200
