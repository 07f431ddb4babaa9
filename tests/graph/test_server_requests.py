"""What an MCP server asks of a run while its tool runs, through the real graph: a question for
the human (elicitation, a LangGraph interrupt), a completion from the run's model (sampling),
progress, roots."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from boundloop.checkpoints import approvals, store
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step
from tests.graph.test_cli import BOUNDLOOP, _env, boundloop

ASKING_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "asking_server.py"
ASK = [{"name": "asking__ask", "args": {}}]
SUMMARIZE = [{"name": "asking__summarize", "args": {"text": "a long text"}}]
OTHERS = [{"name": "asking__steps", "args": {"n": 3}}, {"name": "asking__roots", "args": {}}]
"""The question, the completion and these each in a step of their own: a 2025 server's question or
sampling request during several calls of its session cannot be tied to one, so it is refused."""
NOTE = [{"name": "asking__note", "args": {"text": "hello"}}]
ALLOW_NOTE = {"rules": [{"id": "note", "action": "allow", "server": "asking", "tool": "note"}]}


def _servers(sampling: bool, effects: Path | None = None) -> dict[str, Any]:
    args = [str(ASKING_SERVER), *([str(effects)] if effects else [])]
    return {"mcpServers": {"asking": {"command": sys.executable, "args": args, "trusted": True, "protocol": "legacy", "sampling": sampling}}}




async def _run(runner, tmp_path: Path, workspace: Path, *, sampling: bool, unattended: bool, seen: Any = None,
               calls: list[dict[str, Any]] | None = None, budget: dict[str, Any] | None = None, effects: Path | None = None) -> Any:
    script = tmp_path / "script.json"
    steps = [step(calls=calls)] if calls else [step(calls=ASK), step(calls=SUMMARIZE), step(calls=OTHERS)]
    roles = {"planner": [PLAN_ONE_STEP], "actor": [*steps, step("done")], "critic": [CRITIC_PASS],
             "sampler": [step("a short summary", tokens=(40, 7)), step("more advice", tokens=(40, 7))]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace), servers=_servers(sampling, effects),
                           unattended=unattended, policy=ALLOW_NOTE)
    return await runner.start(Task.model_validate({"goal": "Ask the server's tools", "budget": budget or {}}), settings, observe=seen)


def _results(report) -> dict[str, str]:
    return {message.name: message.content.removeprefix("<tool-output>\n").removesuffix("\n</tool-output>")
            for message in report.values["messages"] if getattr(message, "type", "") == "tool"}


def _question(report) -> dict[str, Any]:
    assert report.waiting, f"the run did not stop for the question: {report.status} {report.values.get('ending')}"
    [waiting] = report.interrupts
    assert waiting["value"]["type"] == "elicitation"
    return waiting


async def test_attended_question_interrupts_the_run_and_the_answer_completes_the_call(runner, tmp_path, workspace):
    events: list[dict[str, Any]] = []

    class Seen:
        def __call__(self, node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
            pass

        def custom(self, event: dict[str, Any]) -> None:
            events.append(event)

    report = await _run(runner, tmp_path, workspace, sampling=True, unattended=False, seen=Seen())
    question = _question(report)["value"]
    assert question["message"] == "Which colour, and how many?" and question["schema"]["required"] == ["colour"]
    assert question["call_id"].endswith(".q0") and question["resend_warning"] is None  # a read: sending it again is harmless
    assert [row["call_id"] for row in await runner.pending(report.thread_id)] == [question["call_id"]]

    with pytest.raises(ApprovalRefused, match="must be a JSON object of its fields"):
        await runner.decide(report.thread_id, question["call_id"], {"decision": "approve", "answer": "green"})
    with pytest.raises(ApprovalRefused, match=r"'blue' is not one of \['red', 'green'\]; the run still waits"):
        await runner.decide(report.thread_id, question["call_id"], {"decision": "approve", "answer": json.dumps({"colour": "blue"})})
    report = await runner.decide(report.thread_id, question["call_id"], {"decision": "approve", "answer": json.dumps({"colour": "green"})},
                                 observe=Seen())
    assert report.status == Terminal.SUCCESS
    results = _results(report)
    assert json.loads(results["asking__ask"]) == {"action": "accept", "content": {"colour": "green", "count": 2}}
    assert json.loads(results["asking__summarize"])["text"] == "a short summary"
    assert json.loads(results["asking__roots"]) == [workspace.resolve().as_uri()]
    usage = report.values["usage"]
    assert usage["escalations"] == 1 and usage["calls_by_role"].get("sampler") == 1, usage
    assert [e["progress"] for e in events if e.get("kind") == "tool_progress" and e["tool"] == "asking__steps"] == [1, 2, 3]
    traced = [event["data"] for event in await runner.trace(report.thread_id) if event["kind"] == "mcp_request"]
    assert [(event["kind"], event.get("action")) for event in traced] == [("elicitation", "asked"), ("elicitation", "accept"), ("sampling", None)]
    assert traced[0]["message"] == question["message"] and traced[1]["content"] == {"colour": "green", "count": 2}
    assert traced[2]["reply"]["content"]["text"] == "a short summary"
    recorded = [event for obs in report.values["observations"] for event in obs.get("server_requests", [])]
    assert recorded[0]["content"] == {"colour": "green", "count": 2} and recorded[0]["tool"] == "asking__ask"


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_reach_the_server(runner, tmp_path, workspace, action):
    report = await _run(runner, tmp_path, workspace, sampling=True, unattended=False)
    waiting = _question(report)
    if action == "decline":  # `boundloop reject`
        report = await runner.decide(report.thread_id, waiting["value"]["call_id"], {"decision": "reject", "message": "no"})
    else:  # the server API's Command(resume=...)
        report = await runner.resume(report.thread_id, decisions={waiting["id"]: {"action": "cancel"}})
    assert json.loads(_results(report)["asking__ask"]) == {"action": action, "content": None}
    assert report.values["usage"]["escalations"] == 1


async def test_what_the_stopped_send_spent_on_sampling_is_charged_and_traced(runner, tmp_path, workspace):
    """The server samples, then asks: the stopped send's completion and the re-sent one's are both paid
    for, the first from the write-ahead record (the stopped step never saved its update)."""
    report = await _run(runner, tmp_path, workspace, sampling=True, unattended=False, calls=[{"name": "asking__consult", "args": {}}])
    question = _question(report)["value"]
    report = await runner.decide(report.thread_id, question["call_id"], {"decision": "approve", "answer": json.dumps({"colour": "red"})})
    assert json.loads(_results(report)["asking__consult"])["action"] == "accept"
    usage = report.values["usage"]
    assert usage["calls_by_role"]["sampler"] == 1 and usage["recovered_model_calls"] == 1
    [recovered] = [event["data"] for event in await runner.trace(report.thread_id) if event["kind"] == "model_calls_recovered"]
    assert recovered["calls"] == [{"role": "sampler", "model": "scripted-test", "answered": True}]
    assert usage["model_turns"] == usage["calls_by_role"]["sampler"] + 1 + sum(
        count for role, count in usage["calls_by_role"].items() if role != "sampler")
    traced = [event["data"] for event in await runner.trace(report.thread_id) if event["kind"] == "mcp_request"]
    assert [(event["kind"], event.get("action")) for event in traced] == [("sampling", None), ("elicitation", "asked"),
                                                                        ("sampling", None), ("elicitation", "accept")]


async def test_no_escalation_left_declines_without_asking(runner, tmp_path, workspace):
    report = await _run(runner, tmp_path, workspace, sampling=True, unattended=False, budget={"escalations": 0})
    assert not report.waiting
    assert json.loads(_results(report)["asking__ask"]) == {"action": "decline", "content": None}
    traced = [event["data"] for event in await runner.trace(report.thread_id) if event["kind"] == "mcp_request"]
    assert traced[0]["why"] == "no escalations left in budget.escalations"


async def test_a_side_effect_stopped_for_a_question_is_sent_again_once_answered_and_acts_once(runner, tmp_path, workspace, db_url):
    effects = tmp_path / "effects.txt"
    report = await _run(runner, tmp_path, workspace, sampling=False, unattended=False, calls=NOTE, effects=effects)
    question = _question(report)["value"]
    assert "not marked idempotent" in question["resend_warning"] and "acts twice" in question["resend_warning"]
    [entry] = await store.run_ledger(runner.pool, report.thread_id)
    assert entry.status == "INTENT" and entry.result == {"stopped_for_question": question["key"]}
    assert not effects.exists()
    report = await runner.decide(report.thread_id, question["call_id"], {"decision": "approve", "answer": json.dumps({"colour": "red"})})
    assert report.status == Terminal.SUCCESS and _results(report)["asking__note"] == "noted"
    assert effects.read_text() == "hello red\n"
    [entry] = await store.run_ledger(runner.pool, report.thread_id)
    assert entry.status == "COMPLETE"


async def test_unattended_run_declines_and_sampling_is_refused_unless_the_server_allows_it(runner, tmp_path, workspace):
    report = await _run(runner, tmp_path, workspace, sampling=False, unattended=True)
    assert not report.waiting
    results = _results(report)
    assert json.loads(results["asking__ask"]) == {"action": "decline", "content": None}
    assert "MCP error" in results["asking__summarize"] and "sampler" not in report.values["usage"]["calls_by_role"]
    assert report.values["usage"]["escalations"] == 0


def test_the_question_is_answered_in_a_new_process_after_the_first_stopped_at_it(db_url, tmp_path):
    """`boundloop run` stops at the question (no terminal); a bad answer is refused in one line;
    `boundloop approve --answer` in another process completes the call."""
    servers, script = tmp_path / "servers.json", tmp_path / "script.json"
    servers.write_text(json.dumps(_servers(sampling=False)))
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=ASK), step("done")], "critic": [CRITIC_PASS]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    common = ["--json", "--database-url", db_url]
    stopped = boundloop("run", "Ask the server", "--model", "scripted", "--script", str(script), "--servers", str(servers),
                        "--thread", "asked", *common)
    waiting = json.loads(stopped.stdout)
    assert waiting["status"] == Terminal.MISSING_INFO, stopped.stderr
    [question] = [item["value"] for item in waiting["interrupts"]]
    assert question["type"] == "elicitation" and question["message"] == "Which colour, and how many?"

    refused = boundloop("approve", "asked", question["call_id"], "--answer", '{"count": 0}', *common)
    assert refused.returncode != 0
    assert [line for line in refused.stderr.splitlines() if line.strip()] == [
        f"error: decision for call {question['call_id']} of run asked refused: 'colour' is a required property; the run still waits "
        "for a decision (2 more answers taken; if all are refused, the question is cancelled). See what is waiting with `boundloop pending`."]

    answered = boundloop("approve", "asked", question["call_id"], "--answer", '{"colour": "red", "count": 3}', *common)
    report = json.loads(answered.stdout)
    assert report["status"] == Terminal.SUCCESS, answered.stderr
    traced = json.loads(boundloop("show", "asked", *common).stdout)["trace"]
    asked = [row["data"] for row in traced if row["kind"] == "mcp_request"]
    assert [(row["action"], row.get("content")) for row in asked] == [("asked", None), ("accept", {"colour": "red", "count": 3})]


def test_a_question_recorded_just_before_a_kill_is_asked_on_resume_and_its_side_effect_acts_once(db_url, tmp_path):
    """Killed after the server's question was recorded, before the run's stop at it was saved. The
    resumed run, in a new process, finds the question and stops at it: the side effect stopped for it
    is neither given up as unknown nor sent without its answer, and the answer completes it once."""
    effects, servers, script, policy = tmp_path / "effects.txt", tmp_path / "servers.json", tmp_path / "script.json", tmp_path / "policy.json"
    servers.write_text(json.dumps(_servers(sampling=False, effects=effects)))
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {
        "planner": [PLAN_ONE_STEP], "actor": [step(calls=NOTE), step("noted")], "critic": [CRITIC_PASS]}}))
    policy.write_text(json.dumps(ALLOW_NOTE))
    common = ["--json", "--database-url", db_url]
    run = ["run", "Note it", "--model", "scripted", "--script", str(script), "--servers", str(servers), "--policy", str(policy),
           "--workspace", str(tmp_path), "--thread", "asked-killed", *common]
    killed = subprocess.run([BOUNDLOOP, *run], env=_env(BOUNDLOOP_CRASH_AT="question:recorded"), capture_output=True, text=True, timeout=180)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    resumed = boundloop("resume", "asked-killed", *common)
    waiting = json.loads(resumed.stdout)
    assert waiting["status"] == Terminal.MISSING_INFO, (resumed.stderr, waiting.get("ending"))
    [question] = [item["value"] for item in waiting["interrupts"]]
    assert question["type"] == "elicitation" and question["call_id"].endswith(".q0")
    assert not effects.exists()

    answered = boundloop("approve", "asked-killed", question["call_id"], "--answer", '{"colour": "red"}', *common)
    assert json.loads(answered.stdout)["status"] == Terminal.SUCCESS, answered.stderr
    assert effects.read_text() == "hello red\n"


async def test_a_drive_reads_under_its_lease_whether_its_run_has_a_recorded_question(pool):
    """A call looks for its recorded questions only when there may be one: the drive reads, under
    the run's lease, whether any server question was ever recorded for the run (a call's approval is
    not one), and learns of one a call of its own records. Without a drive in this process (the
    graph called directly) a call always looks."""
    services = Services(pool=pool)
    await approvals.request_approval(pool, thread_id="asked", call_id="a0.0.q0", tool=approvals.QUESTION_TOOL, args_hash="",
                                     expires_at=None, payload={"type": "elicitation"})
    await approvals.request_approval(pool, thread_id="approval", call_id="a0.0", tool="workspace__write_file", args_hash="h",
                                     expires_at=None, payload={})
    try:
        assert services.questions_may_be_recorded("fresh")
        known = {}
        for run in ("fresh", "asked", "approval"):
            async with services.driving(run):
                known[run] = services.questions_may_be_recorded(run)
        assert known == {"fresh": False, "asked": True, "approval": False}
        async with services.driving("fresh"):
            services.question_recorded("fresh")  # a call of this drive recorded one: the calls after it ask
            assert services.questions_may_be_recorded("fresh")
        assert services.questions_may_be_recorded("fresh"), "the drive ended: nothing is known of the run any more"
    finally:
        await services.aclose()
