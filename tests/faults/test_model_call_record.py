"""A model call's cost survives a SIGKILL: every call is recorded before it is sent, and the step
that runs again after the crash charges the calls its killed executions made.

Real processes: the `boundloop` CLI, killed at a crash point (graph/core/faults.py) and resumed in a
new process; the workspace MCP server over stdio; Postgres."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg

from boundloop.graph.core.status import Exit, Terminal
from tests.graph.conftest import CRITIC_PASS, READ_NOTES, step
from tests.graph.test_cli import _env, boundloop

ASKING_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "asking_server.py"
ACTOR_TOKENS = (100, 10)
"""What each scripted actor reply reports: (input, output) tokens."""


def _task(tmp_path: Path, thread: str) -> list[str]:
    """`run`'s arguments for a short task: read notes.md, answer, critic passes."""
    workspace = tmp_path / thread
    workspace.mkdir()
    (workspace / "notes.md").write_text("Ship on Friday.\n")
    servers = {"mcpServers": {"workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)],
                                            "trusted": True}}}
    roles = {"actor": [step(calls=[READ_NOTES], tokens=ACTOR_TOKENS), step("The notes say: ship on Friday.", tokens=ACTOR_TOKENS)],
             "critic": [CRITIC_PASS]}
    (tmp_path / f"{thread}.servers.json").write_text(json.dumps(servers))
    (tmp_path / f"{thread}.script.json").write_text(json.dumps({"model_id": "scripted-record", "roles": roles}))
    return ["run", "Summarize notes.md", "--model", "scripted", "--script", str(tmp_path / f"{thread}.script.json"),
            "--servers", str(tmp_path / f"{thread}.servers.json"), "--critique", "always", "--thread", thread, "--json"]


def _killed_at(point: str, args: list[str], db_url: str) -> None:
    killed = boundloop(*args, "--database-url", db_url, env=_env(BOUNDLOOP_CRASH_AT=point))
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.returncode} {killed.stderr[-600:]}"


def _report(*args: str, db_url: str, code: Exit = Exit.SUCCESS) -> dict[str, Any]:
    done = boundloop(*args, "--database-url", db_url)
    assert done.returncode == code, done.stderr[-600:]
    return json.loads(done.stdout)


def _killed_and_resumed(point: str, tmp_path: Path, db_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The usage of an uninterrupted run, and of the same task killed at `point` and resumed to SUCCESS."""
    straight = _report(*_task(tmp_path, "straight"), db_url=db_url)["usage"]
    _killed_at(point, _task(tmp_path, "killed"), db_url)
    report = _report("resume", "killed", "--json", db_url=db_url)
    assert report["status"] == Terminal.SUCCESS
    return straight, report["usage"]


def _recorded(db_url: str, thread: str) -> list[tuple[str, str]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [tuple(row) for row in conn.execute("SELECT role, status FROM boundloop_model_calls WHERE thread_id = %s ORDER BY id", (thread,))]


def _recovered_events(db_url: str, thread: str) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM boundloop_trace WHERE thread_id = %s AND kind = 'model_calls_recovered' ORDER BY id", (thread,))]


def test_an_uninterrupted_run_records_each_call_answered_and_charges_nothing_more(db_url, tmp_path):
    report = _report(*_task(tmp_path, "straight"), db_url=db_url)
    assert report["status"] == Terminal.SUCCESS
    assert _recorded(db_url, "straight") == [("actor", "ANSWERED"), ("actor", "ANSWERED"), ("critic", "ANSWERED")]
    assert report["usage"]["model_turns"] == 3 and report["usage"].get("recovered_model_calls", 0) == 0
    assert _recovered_events(db_url, "straight") == []


def test_a_reply_killed_before_its_checkpoint_is_charged_when_the_step_runs_again(db_url, tmp_path):
    """SIGKILL after the actor's first reply, before LangGraph saves the step: the resumed step asks
    the model again, and the lost reply is charged too, at the usage it reported."""
    straight, usage = _killed_and_resumed("leave:act#1", tmp_path, db_url)
    assert usage["model_turns"] == straight["model_turns"] + 1 and usage["recovered_model_calls"] == 1
    assert (usage["input_tokens"], usage["output_tokens"]) == (straight["input_tokens"] + ACTOR_TOKENS[0], straight["output_tokens"] + ACTOR_TOKENS[1])
    assert usage["calls_by_role"] == straight["calls_by_role"]  # the replies the run received: the same
    assert _recorded(db_url, "killed") == [("actor", "ANSWERED")] * 3 + [("critic", "ANSWERED")]
    [event] = _recovered_events(db_url, "killed")
    assert event["calls"] == [{"role": "actor", "model": "scripted-record", "answered": True}]
    assert (event["model_turns"], event["input_tokens"], event["output_tokens"]) == (1, *ACTOR_TOKENS)
    shown = boundloop("show", "killed", "--database-url", db_url)
    assert "recovered: 1 model call(s)" in shown.stdout, shown.stdout
    replayed = boundloop("replay", "killed", "--database-url", db_url)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr  # the trace, recovered calls and all, follows the graph


def test_a_call_killed_before_any_reply_is_charged_its_reservation(db_url, tmp_path):
    """SIGKILL after the call's INTENT is recorded, before the request: nobody knows whether the
    provider saw it, so the resumed run charges a turn and the measured input tokens, no output."""
    straight, usage = _killed_and_resumed("model:after_intent#1", tmp_path, db_url)
    assert usage["model_turns"] == straight["model_turns"] + 1 and usage["recovered_model_calls"] == 1
    assert usage["output_tokens"] == straight["output_tokens"]
    [event] = _recovered_events(db_url, "killed")
    assert event["calls"] == [{"role": "actor", "model": "scripted-record", "answered": False}]
    assert event["output_tokens"] == 0 and 0 < event["input_tokens"] == usage["input_tokens"] - straight["input_tokens"]


def test_a_crash_loop_cannot_spend_past_the_model_turn_budget(db_url, tmp_path):
    """Each process is killed right after its reply. Without the record every resume would ask
    again for free; with it the fourth process finds three turns spent, of three, and stops (unattended:
    no human to ask for more)."""
    args = [*_task(tmp_path, "looping"), "--budget", "model_turns=3", "--unattended"]
    _killed_at("leave:act#1", args, db_url)
    for _ in range(2):
        _killed_at("leave:act#1", ["resume", "looping", "--json"], db_url)
    report = _report("resume", "looping", "--json", db_url=db_url, code=Exit.BUDGET)
    assert report["status"] == Terminal.BUDGET_EXHAUSTED and report["ending"]["dimension"] == "model_turns"
    assert report["usage"]["model_turns"] == 3 and report["usage"]["recovered_model_calls"] == 3
    assert _recorded(db_url, "looping") == [("actor", "ANSWERED")] * 3  # the model was asked three times in all


def test_a_step_run_again_whose_call_samples_no_more_still_pays_for_what_it_sampled(db_url, tmp_path):
    """The server asks the run's model, acts, and the run is killed before the ledger records the
    outcome. The call is not safe to send again, so the re-run step makes no model call at all:
    the completion paid for before the kill is charged all the same."""
    effects = tmp_path / "effects.txt"
    servers = {"mcpServers": {"asking": {"command": sys.executable, "args": [str(ASKING_SERVER), str(effects)], "trusted": True,
                                         "protocol": "legacy", "sampling": True}}}
    policy = {"rules": [{"id": "advise", "action": "allow", "server": "asking", "tool": "advise_and_note"}]}
    roles = {"actor": [step(calls=[{"name": "asking__advise_and_note", "args": {"text": "ship"}}], tokens=ACTOR_TOKENS), step("noted", tokens=ACTOR_TOKENS)],
             "sampler": [step("ship on Friday", tokens=(40, 7))], "critic": [CRITIC_PASS]}
    for name, content in (("servers", servers), ("policy", policy), ("script", {"model_id": "scripted-record", "roles": roles})):
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    _killed_at("tool:after_call#1", ["run", "Note the advice", "--model", "scripted", "--script", str(tmp_path / "script.json"),
                                     "--servers", str(tmp_path / "servers.json"), "--policy", str(tmp_path / "policy.json"),
                                     "--unattended", "--thread", "sampled", "--json"], db_url)
    assert effects.read_text() == "ship: ship on Friday\n"
    resumed = boundloop("resume", "sampled", "--json", "--database-url", db_url)
    report = json.loads(resumed.stdout)
    assert (resumed.returncode, report["status"]) == (Exit.WAITING, Terminal.REVIEW_REQUIRED)  # its outcome is unknown: a human checks
    assert report["usage"]["recovered_model_calls"] == 1 and report["usage"]["input_tokens_by_role"]["sampler"] == 40
    [event] = _recovered_events(db_url, "sampled")
    assert event["calls"] == [{"role": "sampler", "model": "scripted-record", "answered": True}]
    assert effects.read_text() == "ship: ship on Friday\n"  # not sent again
