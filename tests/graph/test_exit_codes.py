"""The exit code of every command that drives a run follows where the run stands, in real
`boundloop` subprocesses on the suite's Postgres with the scripted model: one code per family of
endings, the waiting code for a run that waits for a human, 130 and 143 for a run halted by
SIGINT and SIGTERM."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from boundloop.graph.core.status import EXIT_OF, Exit, Terminal, exit_code
from tests.evals.test_eval_command import SUITE
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, phase_flags, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, _wait_for_node, boundloop
from tests.graph.test_server_requests import ASK, _servers

WRITE = {"name": "workspace__write_file", "args": {"path": "out.md", "content": "result\n"}}
PLAN_WRITE = {"content": {"steps": [{"id": "s1", "description": "write out.md", "tools": ["workspace__write_file"]}], "blocked": None},
              "usage": {"input_tokens": 100, "output_tokens": 20}}
ASK_WRITES = {"rules": [{"id": "ask-writes", "action": "ask", "tool": "write_file"}]}
READ_NOTES = {"name": "workspace__read_file", "args": {"path": "notes.md"}}


def test_every_terminal_code_has_an_exit_code_of_its_family_apart_from_errors_and_bad_input():
    assert set(EXIT_OF) == set(Terminal)
    assert not {Exit.UNEXPECTED, Exit.BAD_INPUT} & set(EXIT_OF.values())
    assert {code for code, family in EXIT_OF.items() if family == Exit.WAITING} == {
        Terminal.CONFIRM_REQUIRED, Terminal.MISSING_INFO, Terminal.REVIEW_REQUIRED}
    assert exit_code(Terminal.BUDGET_EXHAUSTED, waiting=True) == Exit.WAITING  # a budget extension waits for a human
    assert exit_code("INTERRUPTED", waiting=False) == Exit.WAITING  # stopped mid-step: resumable


def _scripted_run(tmp_path: Path, db_url: str, roles: dict[str, Any], *extra: str, thread: str = "run") -> list[str]:
    """`run`'s arguments for a script of `roles`; a script with a planner or a critic asks for them."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    script = tmp_path / f"{thread}.script.json"
    script.write_text(json.dumps({"model_id": "scripted-exit", "roles": roles}))
    asked = phase_flags(roles)
    return ["run", "Summarize notes.md", "--model", "scripted", "--script", str(script), "--workspace", str(workspace),
            "--thread", thread, "--json", "--database-url", db_url, *asked, *extra]


def _policy(tmp_path: Path, rules: dict[str, Any]) -> str:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(rules))
    return str(path)


def _unreachable_server(tmp_path: Path) -> str:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"gone": {"command": str(tmp_path / "no-such-server"), "trusted": True}}}))
    return str(path)


SCENARIOS = {
    "success": ({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")], "critic": [CRITIC_PASS]},
                [], Terminal.SUCCESS, Exit.SUCCESS),
    "waiting": ({"planner": [PLAN_WRITE], "actor": [step(calls=[WRITE])]}, ["--policy", "{ask_writes}"], Terminal.CONFIRM_REQUIRED, Exit.WAITING),
    "budget": ({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES])]}, ["--budget", "model_turns=1", "--unattended"],
               Terminal.BUDGET_EXHAUSTED, Exit.BUDGET),
    "quality": ({"planner": [{"content": {"steps": [], "blocked": {"code": "IMPOSSIBLE", "reason": "notes.md is in another language"}}}]},
                [], Terminal.IMPOSSIBLE, Exit.QUALITY),
    "dependency": ({"planner": [PLAN_ONE_STEP]}, ["--servers", "{unreachable}"], Terminal.UNAVAILABLE_DEP, Exit.UNAVAILABLE),
}


@pytest.mark.parametrize("family", SCENARIOS)
def test_run_exits_with_the_code_of_its_ending_family(db_url, tmp_path, family):
    roles, extra, status, code = SCENARIOS[family]
    files = {"ask_writes": _policy(tmp_path, ASK_WRITES), "unreachable": _unreachable_server(tmp_path)}
    result = boundloop(*_scripted_run(tmp_path, db_url, roles, *[arg.format(**files) for arg in extra]))
    assert json.loads(result.stdout)["status"] == status, result.stderr
    assert result.returncode == code


def test_reject_and_approve_exit_with_the_ending_the_decision_leads_to(db_url, tmp_path):
    """A run waits (3), `resume` finds it still waiting (3); rejected, its step cannot be done
    (PERMISSION_DENIED: 6); approved in another run, it succeeds (0)."""
    policy = ["--policy", _policy(tmp_path, ASK_WRITES)]
    common = ["--json", "--database-url", db_url]
    roles = {"planner": [PLAN_WRITE], "actor": [step(calls=[WRITE]), step("out.md holds the result")], "critic": [CRITIC_PASS]}
    for thread in ("rejected", "approved"):
        waiting = boundloop(*_scripted_run(tmp_path, db_url, roles, *policy, thread=thread))
        assert waiting.returncode == Exit.WAITING, waiting.stderr
    [request] = [item["value"] for item in json.loads(waiting.stdout)["interrupts"]]
    still = boundloop("resume", "rejected", *common)
    assert (json.loads(still.stdout)["status"], still.returncode) == (Terminal.CONFIRM_REQUIRED, Exit.WAITING)

    rejected = boundloop("reject", "rejected", request["call_id"], "--message", "not now", *common)
    assert (json.loads(rejected.stdout)["status"], rejected.returncode) == (Terminal.PERMISSION_DENIED, Exit.PERMISSION), rejected.stderr
    approved = boundloop("approve", "approved", request["call_id"], *common)
    assert (json.loads(approved.stdout)["status"], approved.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), approved.stderr


def test_each_refused_answer_says_how_many_are_left_and_the_last_exits_with_the_ending(db_url, tmp_path):
    servers, script = tmp_path / "servers.json", tmp_path / "script.json"
    servers.write_text(json.dumps(_servers(sampling=False)))
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=ASK), step("no colour was given")], "critic": [CRITIC_PASS]}
    script.write_text(json.dumps({"model_id": "scripted-exit", "roles": roles}))
    common = ["--json", "--database-url", db_url]
    stopped = boundloop("run", "Ask the server", "--model", "scripted", "--script", str(script), "--servers", str(servers),
                        "--workspace", str(tmp_path), "--thread", "asked", *common)
    assert stopped.returncode == Exit.WAITING, stopped.stderr
    [question] = [item["value"] for item in json.loads(stopped.stdout)["interrupts"]]

    def answer() -> subprocess.CompletedProcess[str]:
        return boundloop("approve", "asked", question["call_id"], "--answer", '{"count": 0}', *common)

    first = answer()
    assert first.returncode == Exit.BAD_INPUT
    assert "(2 more answers taken; if all are refused, the question is cancelled)" in first.stderr
    [typed] = re.findall(r"`(boundloop pending)`", first.stderr)  # the refusal's hint, as printed
    listed = boundloop(*shlex.split(typed)[1:], "--json", "--database-url", db_url)
    assert question["call_id"] in [row["call_id"] for row in json.loads(listed.stdout)]
    second = answer()
    assert second.returncode == Exit.BAD_INPUT
    assert "(1 more answer taken; if it is refused, the question is cancelled)" in second.stderr
    answers = [first, second, answer()]
    last = json.loads(answers[2].stdout)
    assert answers[2].returncode == exit_code(last["status"], waiting=bool(last["interrupts"])), answers[2].stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, Exit.SIGTERM), (signal.SIGINT, Exit.SIGINT)])
def test_a_signal_halts_the_run_at_once_and_exits_128_plus_its_number(db_url, tmp_path, signum, code):
    """Sent while a 20 s tool call runs: the call is cancelled, the run recorded USER_CANCEL, the
    process gone within seconds; the `boundloop resume` its halt record names then finishes the run (0),
    making the call again."""
    _, servers, script = _crash_task(tmp_path, "halted", slow_s=20)
    process = subprocess.Popen([BOUNDLOOP, *_run_args(servers, script, "halted", db_url)], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_node(db_url, "halted", "act", count=2, process=process)
    time.sleep(0.5)  # the slow call is in flight
    sent = time.monotonic()
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert time.monotonic() - sent < 15
    halted = json.loads(stdout)
    assert halted["status"] == Terminal.USER_CANCEL
    with psycopg.connect(db_url) as conn:
        [(status,)] = conn.execute("SELECT status FROM boundloop_runs WHERE thread_id = 'halted'").fetchall()
    assert status == Terminal.USER_CANCEL

    [typed] = re.findall(r"`(boundloop resume [^`]+)`", halted["result"]["next_safe_action"])  # the halt's hint, as printed
    resumed = boundloop(*shlex.split(typed)[1:], "--json", "--database-url", db_url)
    assert (json.loads(resumed.stdout)["status"], resumed.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), resumed.stderr


def test_demo_exits_0_and_eval_exits_with_the_quality_code_on_a_missed_threshold(db_url, tmp_path):
    demo = boundloop("demo", "--json", "--database-url", db_url, env=_env(BOUNDLOOP_HOME=str(tmp_path / "home")))
    assert (json.loads(demo.stdout)["status"], demo.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), demo.stderr
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    evaluated = boundloop("eval", str(suite), "--json", "--database-url", db_url)
    assert json.loads(evaluated.stdout)["missed"], evaluated.stderr
    assert evaluated.returncode == Exit.QUALITY
