"""Malformed replies: unparseable tool arguments, an empty answer, a judge or critic that does not
reply in the shape asked — each handled where it happened, never blamed on someone else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from boundloop.graph.core.status import Terminal
from boundloop.graph.trace.fields import missing_trace_fields
from tests.graph.fake_openai import ANSWER, FakeOpenAI

CRITERIA = {"acceptance_criteria": ["names who publishes the notes"]}
SUMMARY = "Ana publishes the notes (from notes.md)."
WRITE = {"tool_calls": [{"name": "workspace__write_file", "arguments": json.dumps({"path": "summary.md", "content": SUMMARY})}]}
MALFORMED = [{"content": ""}, {"content": "The output looks fine to me."}, {"content": '{"verdict": "ok"}'}]


async def test_a_tool_call_with_unparseable_arguments_gets_one_invalid_arguments_result(run_provider):
    calls = [{"name": "workspace__read_file", "arguments": json.dumps({"path": "notes.md"})},
             {"name": "workspace__read_file", "arguments": "{not json"}]
    with FakeOpenAI(faults={"actor": [{"tool_calls": calls}]}) as fake:
        report = await run_provider(fake.base_url)
    assert report.status == Terminal.SUCCESS and report.result["output"] == ANSWER
    statuses = {obs["call_id"]: obs["status"] for obs in report.values["observations"]}
    assert statuses == {"a0.0": "ok", "a0.1": "invalid_arguments"}
    second_turn = [body for body, role in zip(fake.requests, fake.roles) if role == "actor"][1]["messages"]
    sent_calls = [call["id"] for message in second_turn for call in message.get("tool_calls") or []]
    results = {message["tool_call_id"]: message["content"] for message in second_turn if message["role"] == "tool"}
    assert sorted(results) == sorted(sent_calls) and len(sent_calls) == 2  # every call the model made has its one result
    assert results[sent_calls[1]].startswith(
        "invalid_arguments: workspace__read_file: the arguments are not valid JSON "
        "(Expecting property name enclosed in double quotes at line 1 column 2)")


async def test_an_empty_final_answer_fails_verification_without_asking_the_judge(run_provider):
    with FakeOpenAI(faults={"actor": [{"content": ""}]}) as fake:
        report = await run_provider(fake.base_url, task=CRITERIA, unattended=True)
    assert report.status == Terminal.SUCCESS and report.result["output"] == ANSWER
    [repair] = report.values["quality"]["repairs"]
    assert repair["problems"] == ["final answer: the final answer is empty; give the result itself, not only tool calls"]
    assert fake.count("judge") == 1  # only the real answer was judged


async def test_a_malformed_judge_reply_is_asked_again(run_provider):
    with FakeOpenAI(faults={"judge": [{"content": ""}]}) as fake:
        report = await run_provider(fake.base_url, task=CRITERIA)
    assert report.status == Terminal.SUCCESS
    assert report.values["usage"]["calls_by_role"]["judge"] == 2
    reask = [body for body, role in zip(fake.requests, fake.roles) if role == "judge"][1]["messages"][-1]["content"]
    assert reask.startswith("Your reply could not be used: reply is not JSON")


async def test_a_judge_that_never_replies_usably_ends_unavailable_dep_and_keeps_the_work(run_provider, runner, workspace: Path):
    with FakeOpenAI(faults={"actor": [WRITE], "judge": MALFORMED}) as fake:
        down = await run_provider(fake.base_url, task=CRITERIA, unattended=True)
        assert down.status == Terminal.UNAVAILABLE_DEP
        assert down.result["reason"].startswith("the judge gave no usable reply in 3 asks; the last one: reply does not match")
        assert not down.result.get("compensations")  # nobody found the work wrong: nothing rolled back
        assert (workspace / "summary.md").read_text() == SUMMARY
        assert down.values["usage"]["calls_by_role"]["judge"] == 3
        assert await missing_trace_fields(runner.pool, down.thread_id) == []  # the undecided verdict is a validation result
        [checked] = [event["data"]["validation"] for event in await runner.trace(down.thread_id) if event["node"] == "verify"]
        assert checked["passed"] is False and checked["failures"][0]["reason"].startswith("the judge gave no usable verdict in 3 asks")
        done = await runner.resume(down.thread_id)  # the judge is asked again, and now answers
    assert done.status == Terminal.SUCCESS
    assert (workspace / "summary.md").read_text() == SUMMARY


async def test_a_critic_that_never_replies_usably_ends_unavailable_dep_naming_it(run_provider, runner, workspace: Path):
    with FakeOpenAI(faults={"actor": [WRITE], "critic": MALFORMED}) as fake:
        down = await run_provider(fake.base_url, unattended=True)
    assert down.status == Terminal.UNAVAILABLE_DEP
    assert down.result["reason"].startswith("the critic gave no usable reply in 3 asks")
    assert await missing_trace_fields(runner.pool, down.thread_id) == []  # the unscored critique is a validation result
    [checked] = [event["data"]["validation"] for event in await runner.trace(down.thread_id) if event["node"] == "critique"]
    assert checked == {"check": "critique", "passed": None, "weighted": 0.0, "quality_score": None}  # unscored: no quality score either
    assert (workspace / "summary.md").read_text() == SUMMARY and fake.count("critic") == 3


@pytest.mark.parametrize(("role", "finding"), [
    ("judge", "verifier failed: judge: the judge gave no usable verdict in 3 asks (reply does not match"),
    ("critic", "verifier passed; critic gave no usable reply (critic reply does not match"),
])
async def test_an_attended_run_asks_a_human_when_a_role_never_replies_usably(run_provider, runner, workspace: Path, role, finding):
    with FakeOpenAI(faults={"actor": [WRITE], role: MALFORMED}) as fake:
        waiting = await run_provider(fake.base_url, task=CRITERIA)
        assert waiting.status == Terminal.REVIEW_REQUIRED and waiting.waiting
        [item] = waiting.interrupts
        assert item["value"]["reason"].startswith(f"the verifier and the critic disagree: {finding}")
        done = await runner.decide(waiting.thread_id, item["value"]["call_id"], {"decision": "approve", "approver": "ana"})
    assert done.status == Terminal.SUCCESS
    assert (workspace / "summary.md").read_text() == SUMMARY
