"""Every hint the CLI prints is a command that works when typed: each test makes `boundloop`
print a hint (a run's next safe action, a bad-input example), then runs what the hint says, as
printed, in a new `boundloop` process, and checks it parses and does what the hint promised."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from boundloop.graph.core.status import Exit, Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, phase_flags, step
from tests.graph.fake_openai import FakeOpenAI
from tests.graph.test_cli import _env, boundloop

READ_NOTES = {"name": "workspace__read_file", "args": {"path": "notes.md"}}


def _hinted(text: str, flag: str) -> list[str]:
    """The `flag VALUE` a hint in `text` suggests, split as a shell would."""
    found = re.search(rf"\(({re.escape(flag)} [^)]+)\)", text) or re.search(rf"e\.g\. ({re.escape(flag)} [^)\n]+)", text)
    assert found, f"no {flag} hint in: {text}"
    return shlex.split(found.group(1))


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir(exist_ok=True)
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    return root


def _scripted(tmp_path: Path, db_url: str, thread: str, roles: dict[str, Any], *extra: str) -> list[str]:
    """`run`'s arguments for a script of `roles`; a script with a planner or a critic asks for them."""
    script = tmp_path / f"{thread}.script.json"
    script.write_text(json.dumps({"model_id": "scripted-hint", "roles": roles}))
    asked = phase_flags(roles)
    return ["run", "Summarize notes.md", "--model", "scripted", "--script", str(script), "--workspace", str(_workspace(tmp_path)),
            "--thread", thread, "--unattended", "--json", "--database-url", db_url, *asked, *extra]


def _ending(result: Any) -> dict[str, Any]:
    report = json.loads(result.stdout)
    return {"status": report["status"], **(report.get("ending") or {}), "budget": report["budget"]}


def test_a_small_cost_limit_is_told_a_larger_one_and_the_run_finishes_under_it(db_url, tmp_path):
    """$0.001 a call ($1 per million input tokens, 1000 tokens a call): a limit of $0.003 stops
    before the critic, whose measured request costs more than the $0.0005 it reports; the limit
    the hint names, sized on what the refused call asked for, lets the run finish."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"prices": {"scripted-hint": [1, 0]}}))
    roles = {"planner": [step({"steps": [{"id": "s1", "description": "answer from the notes"}], "blocked": None}, tokens=(1000, 0))],
             "actor": [step(calls=[READ_NOTES], tokens=(1000, 0)), step("Ana publishes the notes.", tokens=(1000, 0))],
             "critic": [{**CRITIC_PASS, "usage": {"input_tokens": 500, "output_tokens": 0}}]}
    stopped = boundloop(*_scripted(tmp_path, db_url, "small", roles, "--config", str(config), "--budget", "cost_usd=0.003"))
    ending = _ending(stopped)
    assert ending["status"] == Terminal.BUDGET_EXHAUSTED, stopped.stderr
    hint = _hinted(ending["next_safe_action"], "--budget")
    named = float(hint[1].removeprefix("cost_usd="))
    assert hint[0] == "--budget" and named > 0.003

    again = boundloop(*_scripted(tmp_path, db_url, "larger", roles, "--config", str(config), *hint))
    assert _ending(again)["budget"]["cost_usd"] == named
    assert (_ending(again)["status"], again.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), again.stderr


def test_a_count_limit_hint_names_a_limit_the_run_finishes_under(db_url, tmp_path):
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[READ_NOTES | {"args": {"path": "./notes.md"}}]),
                                                    step("Ana publishes the notes.")], "critic": [CRITIC_PASS]}
    stopped = boundloop(*_scripted(tmp_path, db_url, "one-call", roles, "--budget", "tool_calls=1"))
    ending = _ending(stopped)
    assert (ending["status"], ending["dimension"]) == (Terminal.BUDGET_EXHAUSTED, "tool_calls"), stopped.stderr
    hint = _hinted(ending["next_safe_action"], "--budget")
    assert hint == ["--budget", "tool_calls=2"]
    again = boundloop(*_scripted(tmp_path, db_url, "two-calls", roles, *hint))
    assert (_ending(again)["status"], again.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), again.stderr


def test_an_unpriced_model_under_a_cost_limit_is_told_both_ways_on_and_each_works(db_url, tmp_path):
    """A model no price table knows: the hint says to price it in the --config file or to drop
    the cost limit; both, done as printed, let the run finish."""
    workspace = _workspace(tmp_path)
    with FakeOpenAI() as fake:
        def run(thread: str, config: dict[str, Any], *extra: str) -> Any:
            path = tmp_path / f"{thread}.config.json"
            path.write_text(json.dumps({"model": "unpriced-model", "base_url": fake.base_url, "api_key": "sk-hint-0123456789", **config}))
            return boundloop("run", "Summarize notes.md", "--config", str(path), "--workspace", str(workspace), "--unattended",
                             "--thread", thread, "--json", "--database-url", db_url, *extra)

        stopped = run("unpriced", {}, "--budget", "cost_usd=1")
        ending = _ending(stopped)
        assert ending["status"] == Terminal.BUDGET_EXHAUSTED and "no price for model 'unpriced-model'" in ending["reason"], stopped.stderr
        hint = ending["next_safe_action"]
        assert "--price" not in hint
        without_limit = run("no-limit", {}, "--budget", "cost_usd=1", *_hinted(hint, "--budget"))
        assert (_ending(without_limit)["status"], without_limit.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), without_limit.stderr

        [prices] = re.findall(r'"prices": (\{[^}]*\})', hint)
        typed = json.loads(prices.replace("INPUT", "0.15").replace("OUTPUT", "0.6"))
        assert list(typed) == ["unpriced-model"]
        priced = run("priced", {"prices": typed}, "--budget", "cost_usd=1")
        assert (_ending(priced)["status"], priced.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), priced.stderr
        assert json.loads(priced.stdout)["usage"]["cost_usd"] > 0


@pytest.mark.parametrize(("bad", "flag"), [(["--budget", "tool_calls"], "--budget"), (["--budget", "tool_calls=-1"], "--budget"),
                                           (["--approval-timeout", "-1"], "--approval-timeout")])
def test_a_bad_value_is_refused_with_an_example_that_parses(db_url, tmp_path, bad, flag):
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step("Ana publishes the notes.")], "critic": [CRITIC_PASS]}
    refused = boundloop(*_scripted(tmp_path, db_url, "bad", roles, *bad))
    assert refused.returncode == Exit.BAD_INPUT
    example = _hinted(refused.stderr, flag)
    accepted = boundloop(*_scripted(tmp_path, db_url, "example", roles, *example))
    assert (_ending(accepted)["status"], accepted.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), accepted.stderr


def test_a_run_without_a_key_is_told_how_to_run_offline_and_that_runs(db_url, tmp_path):
    refused = boundloop("run", "Summarize notes.md", "--database-url", db_url)
    assert refused.returncode == Exit.BAD_INPUT
    [offline] = re.findall(r"run offline with (--model scripted --script FILE)", refused.stderr)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-hint", "roles": {
        "planner": [PLAN_ONE_STEP], "actor": [step("Ana publishes the notes.")], "critic": [CRITIC_PASS]}}))
    typed = shlex.split(offline.replace("FILE", str(script)))
    ran = boundloop("run", "Summarize notes.md", *typed, "--workspace", str(_workspace(tmp_path)), "--json", "--database-url", db_url,
                    env=_env())
    assert (_ending(ran)["status"], ran.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), ran.stderr


def test_an_unknown_run_is_told_to_list_runs_and_that_lists_them(db_url, tmp_path):
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step("Ana publishes the notes.")], "critic": [CRITIC_PASS]}
    boundloop(*_scripted(tmp_path, db_url, "known", roles))
    unknown = boundloop("show", "run-nope", "--database-url", db_url)
    assert unknown.returncode == Exit.BAD_INPUT
    [typed] = re.findall(r"`(boundloop runs)`", unknown.stderr)
    listed = boundloop(*shlex.split(typed)[1:], "--json", "--database-url", db_url)
    assert [row["thread_id"] for row in json.loads(listed.stdout)] == ["known"]
