"""Bounded context on long runs: every model request is measured before it is
sent, the pressure gate compacts the actor's context structurally, and a long run keeps every
must-keep item in front of the model while each request stays under the limit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, ToolMessage

from boundloop.checkpoints import store
from boundloop.graph.context import short_calls
from boundloop.graph.models import size
from boundloop.graph.trace.replay import replay_run
from boundloop.graph.models.catalog import model_for
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, step
from tests.graph.test_trace import COPY

CALLS = int(os.environ.get("BOUNDLOOP_CONTEXT_CALLS", "60"))
"""Tool calls of the long run; the 500-call command of tests/README.md sets it."""
LIMIT = 6_000
"""The context budget of the long run, in tokens (about 12,000 characters by the estimate)."""


def read(n: int) -> dict[str, Any]:
    return {"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 1000 + n}}


def long_script(calls: int) -> dict[str, list[dict[str, Any]]]:
    plan = {"steps": [{"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"]},
                      {"id": "s2", "description": "list the files", "depends_on": ["s1"], "tools": ["workspace__list_files"]}],
            "blocked": None}
    actor = [{"content": f"Draft {n}: still reading.", "tool_calls": [read(n)]} for n in range(calls - 1)]
    actor += [{"tool_calls": [{"name": "workspace__list_files", "args": {}}]}, {"content": "Ana publishes the notes."}]
    return {"planner": [{"content": plan}], "actor": actor, "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}


@pytest.fixture
def long_notes(workspace: Path) -> Path:
    (workspace / "notes.md").write_text("Action items:\n- Ana: publish the notes\n" + "Background line of the meeting.\n" * 24)
    return workspace


async def test_a_long_run_stays_bounded_and_keeps_every_must_keep_item(run_script, runner, long_notes, tmp_path):
    task = {"acceptance_criteria": ["names the owner"],
            "budget": {"model_turns": None, "tool_calls": None, "input_tokens": None, "wall_clock_s": None,
                       "tool_result_chars": None, "context_tokens": LIMIT}}
    report = await run_script(long_script(CALLS), task=task, unattended=True, planning="always")  # the plan is in the record
    assert report.status == Terminal.SUCCESS, report.values.get("ending")

    events = await runner.trace(report.thread_id)
    actor_calls = [event["data"]["context"] for event in events
                   if event["node"] == "act" and "context" in event["data"] and not event["data"]["context"].get("pressure")]
    sizes = [measured["tokens"] for measured in actor_calls]
    assert len(sizes) == CALLS + 1
    assert max(sizes) <= LIMIT * 0.8, "a request passed the compaction threshold"
    usage = report.values["usage"]
    assert usage["context_tokens"] == max(event["data"]["context"]["tokens"] for event in events
                                          if "context" in event["data"] and not event["data"]["context"].get("pressure"))
    assert usage["compactions"] >= 3
    assert any(event["node"] == "compact" for event in events)
    half = len(sizes) // 2
    first, second = sum(sizes[:half]), sum(sizes[half:2 * half])
    assert second < 1.5 * first, f"context grows with the run: {first} then {second} tokens"  # quadratic growth gives ~3x
    print(f"\n{CALLS} calls, limit {LIMIT}: request tokens min {min(sizes)} max {max(sizes)}, halves {first} / {second}, "
          f"all requests {sum(sizes)}, input_tokens {usage['input_tokens']}, compactions {usage['compactions']}")

    last = model_for(report.values["settings"]).last_request("actor")
    text = "\n".join(str(message.content) for message in last)
    record = next(str(message.content) for message in last if "Run state record" in str(message.content))
    assert "Goal: Summarize notes.md" in record and "- names the owner" in record                  # goal and criteria
    assert "s2 [done]" in record and "depends on: s1" in record                                         # plan and dependencies
    assert "- a0.0: workspace__read_file -> ok, verified, step s1" in record                         # every call id
    assert f"- a1.0–a{CALLS - 2}.0 ({CALLS - 2} calls): workspace__read_file -> ok, verified, step -" in record
    assert f"- a{CALLS - 1}.0: workspace__list_files -> ok, verified, step s2" in record
    assert "Open questions and blocked steps:" in record                                             # open steps
    assert f"tool_calls {CALLS}/-" in record and f"/{LIMIT}" in record                          # budget state
    assert f"run {report.thread_id}" in record and "compaction:1" in record                        # trace pointers
    assert "escalations: 0 of" in record                                                              # escalation state
    dropped = record.split("Dropped calls' arguments")[1].split("\n\n")[0].splitlines()[1:]                # dropped calls' short forms, bounded
    assert 0 < len(dropped) <= short_calls.RECENT + short_calls.FAILED and all(len(line) <= 320 for line in dropped)
    assert all(line.startswith("- a") and 'workspace__read_file(path="notes.md", max_chars=' in line and line.endswith("-> ok") for line in dropped)
    assert "Draft 0" not in text                                                                      # drafts dropped
    _assert_one_result_per_call(last)

    model = model_for(report.values["settings"])
    for role in ("judge", "critic"):  # one request each, with the output and 60 calls' evidence: fitted, oldest evidence left out
        request = model.last_request(role)
        tokens, _ = size.measure(model.model_id, request)
        assert tokens <= LIMIT, f"the {role}'s request carried {tokens} tokens under a context budget of {LIMIT}"
        sent = "\n".join(str(message.content) for message in request)
        assert "older verified observation(s) left out to fit the context limit" in sent and f"[a{CALLS - 1}.0]" in sent


def _assert_one_result_per_call(request: list[Any]) -> None:
    called = [call["id"] for message in request if isinstance(message, AIMessage) for call in message.tool_calls]
    answered = [message.tool_call_id for message in request if isinstance(message, ToolMessage)]
    assert sorted(called) == sorted(answered) and len(set(answered)) == len(answered)


async def test_compaction_that_cannot_make_room_halts_before_the_call(run_script, runner):
    """A limit the must-keep state alone passes: the run stops BUDGET_EXHAUSTED on context_tokens,
    and the actor is never sent the oversized request. The planner's call was measured."""
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step("never sent")]},
                              task={"budget": {"context_tokens": 2_000}}, unattended=True, planning="always")
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "context_tokens"
    assert report.values["ending"]["reason"].startswith("context_tokens: the run's must-keep state alone needs ")
    assert "actor" not in report.values["usage"]["calls_by_role"]
    events = await runner.trace(report.thread_id)
    planned = next(event["data"]["context"] for event in events if event["node"] == "plan")
    assert planned["role"] == "planner" and planned["tokens"] > 0 and planned["method"] == "estimate"
    assert report.values["usage"]["context_tokens"] == planned["tokens"]
    assert [event["node"] for event in events if event["node"] in ("act", "compact")] == ["act", "compact"]


async def test_the_model_reads_back_what_compaction_dropped_and_nothing_of_another_run(run_script, runner, long_notes, pool, db_url):
    foreign = await store.put_payload(pool, "another-run", "a0.0", "another run's output")
    fetches = [{"name": "boundloop__fetch_payload", "args": {"ref": "a0.0"}},
               {"name": "boundloop__fetch_payload", "args": {"ref": foreign}}]
    reads = 5
    actor = [step(calls=[read(n)]) for n in range(reads)] + [step(calls=fetches), step("Ana publishes the notes.")]
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": actor, "critic": [CRITIC_PASS]},
                              task={"budget": {"context_tokens": LIMIT}}, unattended=True, context_threshold=0.6)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert report.values["usage"]["compactions"] >= 1
    fetched, refused = [await _shown(report, pool, call_id) for call_id in (f"a{reads}.0", f"a{reads}.1")]
    assert fetched.startswith("a0.0:\n<tool-output>") and "- Ana: publish the notes" in fetched
    assert refused.startswith("not_found: nothing is stored under")
    statuses = {obs["call_id"]: obs["status"] for obs in report.values["observations"]}
    assert (statuses[f"a{reads}.0"], statuses[f"a{reads}.1"]) == ("ok", "not_found")
    assert report.values["usage"]["per_tool"]["boundloop__fetch_payload"] == 2
    replayed = await replay_run(pool, report.thread_id, runner.graph)
    assert replayed.valid, replayed.problems  # the built-in read carries its own decision: allowed, rule builtin:fetch_payload

    copy = f"{report.thread_id}-undecided"  # the read's decision taken out: replay catches it like any other undecided call
    with psycopg.connect(db_url, autocommit=True) as conn:
        for statement in COPY.strip().split(";"):
            conn.execute(statement, {"copy": copy, "run": report.thread_id})
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE boundloop_trace SET data = data - 'decisions' WHERE thread_id = %s AND node = 'act'"
                     " AND data->'tool_calls' @> '[{\"name\": \"boundloop__fetch_payload\"}]'", (copy,))
    undecided = await replay_run(pool, copy, runner.graph)
    assert f"tool call a{reads}.0 (boundloop__fetch_payload) ran with no permission decision before it (gate skipped)" in " ".join(undecided.problems)


async def _shown(report: Any, pool: Any, call_id: str) -> str:
    """The result text the actor was shown for `call_id`: in the conversation, or — when a later
    compaction dropped it — in the payload store under the call id."""
    tool_call_id = next(obs["tool_call_id"] for obs in report.values["observations"] if obs["call_id"] == call_id)
    for message in report.values["messages"]:
        if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
            return str(message.content)
    return (await store.get_call_payload(pool, report.thread_id, call_id)).body


async def test_each_actor_request_is_measured_once_for_the_pressure_gate_and_the_call(run_script, long_notes, monkeypatch):
    """A long conversation costs a pass over every message to measure: the gate's measure is the call's."""
    measured_with_tools: list[int] = []
    measure = size.measure

    def counting(model: str, messages: Any, tools: Any = None) -> tuple[int, str]:
        if tools:  # the actor's requests carry the tools; the planner's, judge's and critic's do not
            measured_with_tools.append(len(messages))
        return measure(model, messages, tools)

    monkeypatch.setattr(size, "measure", counting)
    report = await run_script(long_script(4), unattended=True)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert report.values["usage"]["calls_by_role"]["actor"] == 5
    assert len(measured_with_tools) == 5, measured_with_tools


async def test_the_record_keeps_each_calls_arguments_and_a_failed_calls_error(run_script, runner, long_notes):
    """Once the turns are dropped, the record still says which file each call read and what a failed call said."""
    missing = {"name": "workspace__read_file", "args": {"path": "minutes-2026.md"}}
    actor = [step(calls=[missing])] + [step(calls=[read(n)]) for n in range(6)] + [step("Ana publishes the notes.")]
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": actor, "critic": [CRITIC_PASS]},
                              task={"budget": {"context_tokens": LIMIT}}, unattended=True, context_threshold=0.6)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert report.values["usage"]["compactions"] >= 1
    last = model_for(report.values["settings"]).last_request("actor")
    assert not any(isinstance(message, AIMessage) and message.tool_calls and message.tool_calls[0]["args"] == missing["args"] for message in last)
    record = next(str(message.content) for message in last if "Run state record" in str(message.content))
    assert f'- a0.0 workspace__read_file(path="minutes-2026.md") -> tool_error: Error executing tool read_file: path \'minutes-2026.md\': No such file' in record
    assert '- a1.0 workspace__read_file(path="notes.md", max_chars=1000) -> ok' in record
