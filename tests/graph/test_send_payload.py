"""What a tool task's Send stores (graph/sends.py): its call's id, nothing else (LangGraph stores
it twice per call), and what the task reads from its step's state instead: the call, the run's
settings, budget and tools whole, also in a new process after a kill between act's saved step and
the call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import psycopg
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg.rows import dict_row

from boundloop.graph import guards
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal, exit_code
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


async def test_a_send_stores_its_calls_id_and_nothing_else(run_script, runner):
    """Three reads, three Sends of under 100 bytes each (with the call, the tool's definition, the
    settings and the usage counters the task read, one was 1.6 KB), and each call ran as proposed."""
    report = await run_script({"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS), step("done")],
                               "critic": [CRITIC_PASS]})
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    stored = await _stored_sends(runner, report.thread_id)
    observations = report.values["observations"]
    assert [(send.node, send.arg) for _, send in stored] == [("execute", {"call_id": obs["call_id"]}) for obs in observations]
    assert all(size < 100 for size, _ in stored), stored
    assert [obs["status"] for obs in observations] == ["ok"] * 3
    assert [json.loads(obs["excerpt"])["path"] for obs in observations] == ["notes.md"] * 3


async def test_the_task_gets_its_call_and_the_runs_settings_budget_and_tools_whole(run_script, monkeypatch):
    """Non-default settings and budget overrides, the pinned tools and the usage so far, as the
    run's state holds them at the step that sent the call."""
    payloads: list[dict[str, Any]] = []
    original = guards.task_payload

    def recording(state: dict[str, Any], node: str, call_id: str) -> dict[str, Any]:
        payloads.append(original(state, node, call_id))
        return payloads[-1]

    monkeypatch.setattr(guards, "task_payload", recording)
    report = await run_script({"actor": [step(calls=[READS[0]]), step("done")]},
                              task={"budget": {"tool_calls": 7, "wall_clock_s": None}}, tool_timeout_s=12.5, max_result_chars=900,
                              user="ana", prices={"scripted-test": (1.0, 2.0)})
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    [task] = payloads
    assert task["call"]["name"] == "workspace__read_file" and task["call"]["args"] == READS[0]["args"]
    assert task["call"]["call_id"] == report.values["observations"][0]["call_id"]
    assert task["settings"] == report.values["settings"] and task["budget"] == report.values["budget"]
    assert task["settings"]["prices"] == {"scripted-test": [1.0, 2.0]} and task["settings"]["tool_timeout_s"] == 12.5
    assert task["tools"] == report.values["tools"] and task["profile"] == report.values["task"]["profile"]
    assert task["usage"]["model_turns"] == 1 and task["usage"]["tool_calls"] == 1  # the actor's turn; this call reserved


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
    async with Runner(db_url) as runner:
        report = await runner.report("sends")
    assert resumed.returncode == exit_code(report.status, waiting=bool(report.interrupts)), resumed.stderr
    [observation] = [obs for obs in report.values["observations"] if obs["tool"] == "probe__write_note"]
    assert observation["detail"].startswith("timeout"), observation
    assert observation["latency_ms"] < 4_000
    assert observation["truncated"] and observation["chars"] > 200 and len(observation["excerpt"]) <= 200
