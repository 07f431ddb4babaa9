"""The periodic goal check (graph/quality/goal_check.py): a window of actor turns without progress ends the run
whatever the goal_check model claims; the model can end a run whose objective no longer holds; a
malformed or missing reply falls back to the deterministic signals; every check is charged and traced."""

from __future__ import annotations

import time

import pytest

from boundloop.graph.quality import goal_check
from boundloop.graph.trace.replay import replay_run
from boundloop.graph.core.status import Terminal
from boundloop.graph.trace.fields import missing_trace_fields
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.fake_openai import ANSWER, FakeOpenAI

FINAL = step("Ana publishes the notes.")


def read(path: str) -> dict:
    return step(calls=[{"name": "workspace__read_file", "args": {"path": path}}])


def verdict(valid: bool, reason: str = "", evidence: list[str] | None = None) -> dict:
    return {"content": {"objective_valid": valid, "reason": reason, "evidence": evidence or []}, "usage": {"input_tokens": 70, "output_tokens": 9}}


def _state(turns: int, every: int = 3, observations: list | None = None, scores: list | None = None, record: dict | None = None) -> dict:
    return {"settings": {"goal_check_every": every}, "usage": {"calls_by_role": {"actor": turns}}, "observations": observations or [],
            "quality": {"scores": scores or []}, "plan": {"steps": []}, **({"goal_check": record} if record else {})}


@pytest.mark.parametrize(("state", "window"), [
    (_state(3), (0, 2)),
    (_state(6), (3, 5)),
    (_state(4), None),  # between checks
    (_state(0, every=0), None),  # no turn yet
    (_state(3, every=0), None),  # off
    (_state(3, record={"window": [0, 2], "decision": "continue"}), None),  # checked once: act re-entered after compaction or a human
], ids=["first window", "second window", "between checks", "no turn", "off", "already checked"])
def test_a_check_is_due_at_the_start_of_every_nth_turn_once(state, window):
    assert goal_check.due(state) == window


def test_only_progress_inside_the_window_counts():
    observations = [{"call_id": f"a{n}.0", "phase": "act", "status": "ok", "stage": "verified"} for n in (0, 4)]
    observations.append({"call_id": "a3.0", "phase": "act", "status": "tool_error", "stage": "attempted"})
    state = _state(6, observations=observations, scores=[{"turn": 2, "score": 0.4}, {"turn": 5, "score": 0.9}])
    assert goal_check.signals(state, 3, 5) == {"verified_observations": 1, "plan_steps_done": 0, "repair_gains": 1}
    assert goal_check.signals(state, 1, 2) == {"verified_observations": 0, "plan_steps_done": 0, "repair_gains": 1}  # the first score is a gain
    assert goal_check.signals(_state(3, observations=observations[2:]), 0, 2) == {"verified_observations": 0, "plan_steps_done": 0, "repair_gains": 0}


def test_the_tripwire_reads_the_recorded_decision_only():
    assert goal_check.no_progress(_state(3)) is None  # nothing recorded: no guard judges on its own
    assert goal_check.no_progress(_state(3, record={"window": [0, 2], "decision": "continue"})) is None
    stopped = goal_check.no_progress(_state(3, record={"window": [0, 2], "decision": "no_progress"}))
    assert stopped["code"] == "REPEATED_FAILURE" and stopped["reason"].startswith("goal check after actor turn 3: no progress in the last 3 turns")


async def test_fabricated_evidence_does_not_save_a_run_without_progress(run_script):
    """Two turns of failing reads (different files, so no single call loops). The goal_check model says all is
    well and cites the failed call and one that never ran: both are ignored, and the run ends before the actor's third turn."""
    report = await run_script(
        {"actor": [read("a.md"), read("b.md"), read("c.md")],
         "goal_check": [verdict(True, "reading the files is progress", ["a0.0", "a9.9"])]},
        goal_check_every=2, unattended=True,
    )
    assert report.status == Terminal.REPEATED_FAILURE
    assert report.result["reason"] == ("goal check after actor turn 2: no progress in the last 2 turns "
                                       "(no new verified observation, no plan step done, no better repair score)")
    record = report.values["goal_check"]
    assert record["decision"] == "no_progress" and record["window"] == [0, 1]
    assert record["signals"] == {"verified_observations": 0, "plan_steps_done": 0, "repair_gains": 0}
    assert record["model"]["verdict"]["evidence"] == [] and record["model"]["verdict"]["ignored_evidence"] == ["a0.0", "a9.9"]
    usage = report.values["usage"]
    assert usage["calls_by_role"] == {"actor": 2, "goal_check": 1}  # the actor was not asked a third time
    assert usage["model_turns"] == 3 and usage["input_tokens"] == 2 * 100 + 70 and usage["output_tokens"] == 2 * 10 + 9
    assert [obs["status"] for obs in report.values["observations"]] == ["tool_error", "tool_error"]


async def test_the_model_ends_an_unattended_run_whose_objective_no_longer_holds(run_script):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), FINAL],
         "goal_check": [verdict(False, "the notes were already published", ["a0.0"])]},
        goal_check_every=1, unattended=True,
    )
    assert report.status == Terminal.AMBIGUOUS_INTENT
    assert report.result["reason"] == "the goal check after actor turn 1 found the objective no longer valid: the notes were already published"
    record = report.values["goal_check"]
    assert record["decision"] == "objective_invalid" and record["signals"]["verified_observations"] == 1
    assert record["model"]["verdict"]["evidence"] == ["a0.0"]  # a real verified call of the window
    assert report.values["usage"]["calls_by_role"]["actor"] == 1


async def test_an_attended_run_asks_a_human_to_restate_the_objective_and_goes_on(run_script, runner):
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP, PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), FINAL], "critic": [CRITIC_PASS],
         "goal_check": [verdict(False, "the notes were already published")]},
        goal_check_every=1,
    )
    assert waiting.status == Terminal.AMBIGUOUS_INTENT and waiting.waiting
    [item] = waiting.interrupts
    assert item["value"]["type"] == "ask_user" and "already published" in item["value"]["question"]
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"answer": "summarize them anyway"}})
    assert done.status == Terminal.SUCCESS
    assert done.values["usage"]["calls_by_role"]["goal_check"] == 1  # the answered window is not checked again


@pytest.mark.parametrize("reply", [
    {"content": "the run looks fine"},
    {"content": ""},
    {"content": {"objective_valid": "no", "reason": "a string is not a verdict"}},
    None,  # the script has no goal_check step: no reply
], ids=["not json", "empty", "wrong type", "no reply"])
async def test_an_unusable_reply_is_no_verdict_and_the_signals_decide(run_script, runner, reply):
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), FINAL], "critic": [CRITIC_PASS]}
    report = await run_script({**roles, **({"goal_check": [reply]} if reply else {})}, goal_check_every=1, unattended=True)
    assert report.status == Terminal.SUCCESS
    record = next(event["data"]["goal_check"] for event in await runner.trace(report.thread_id) if "goal_check" in event["data"])
    assert record["decision"] == "continue" and "verdict" not in record["model"]
    assert record["model"]["outcome"] == ("no_reply" if reply is None else "malformed") and record["model"]["detail"]
    assert report.values["usage"]["calls_by_role"].get("goal_check", 0) == (0 if reply is None else 1)


async def test_a_passing_check_is_charged_and_in_a_complete_replayable_trace(run_script, runner):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), FINAL], "critic": [CRITIC_PASS],
         "goal_check": [verdict(True, "the notes were read", ["a0.0"])]},
        goal_check_every=1, unattended=True,
    )
    assert report.status == Terminal.SUCCESS
    events = await runner.trace(report.thread_id)
    [checked] = [event for event in events if "goal_check" in event["data"]]
    assert checked["node"] == "act"
    assert checked["data"]["goal_check"] == {
        "window": [0, 0], "signals": {"verified_observations": 1, "plan_steps_done": 0, "repair_gains": 0}, "decision": "continue",
        "model": {"outcome": "verdict", "detail": "",
                  "verdict": {"objective_valid": True, "reason": "the notes were read", "evidence": ["a0.0"], "ignored_evidence": []}},
    }
    assert checked["data"]["budget"]["tokens"] == 70 + 9 + 100 + 10  # the check and the actor's turn, in one step
    assert report.values["usage"]["calls_by_role"]["goal_check"] == 1
    assert await missing_trace_fields(runner.pool, report.thread_id) == []
    replayed = await replay_run(runner.pool, report.thread_id, runner.graph)
    assert replayed.valid, replayed.problems


async def test_a_question_the_budget_cannot_afford_is_skipped_and_recorded(run_script):
    """Two model turns: the first actor turn leaves one, which the actor's second turn needs."""
    report = await run_script(
        {"actor": [step(calls=[READ_NOTES]), FINAL], "goal_check": [verdict(False, "never asked")]},
        task={"budget": {"model_turns": 2}}, goal_check_every=1, unattended=True,
    )
    record = report.values["goal_check"]
    assert record["decision"] == "continue" and record["model"]["outcome"] == "skipped"
    assert record["model"]["detail"].startswith("not asked: the actor's call would not fit after it (budget.model_turns exhausted")
    assert "goal_check" not in report.values["usage"]["calls_by_role"]
    assert report.values["usage"]["calls_by_role"]["actor"] == 2


async def test_a_hung_goal_check_is_no_verdict_and_the_run_goes_on(run_script, monkeypatch):
    """The provider never answers the goal check: the request times out (no retry left), is charged as a
    failed attempt, and the actor's turn goes ahead — a hung check neither crashes nor ends the run."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with FakeOpenAI(faults={"goal_check": [{"hang_s": 45}]}) as fake:
        started = time.monotonic()
        report = await run_script({}, model="fake-model", script=None, base_url=fake.base_url, prices={"fake-model": (2.0, 8.0)},
                                  model_timeout_s=0.5, goal_check_every=1, unattended=True, task={"budget": {"retries": 0}})
    assert time.monotonic() - started < 30  # not the 45 s the provider hung
    assert report.status == Terminal.SUCCESS and report.result["output"] == ANSWER
    assert fake.count("goal_check") == 1
    record = report.values["goal_check"]
    assert record["decision"] == "continue" and record["model"]["outcome"] == "no_reply"
    assert "no reply within 0.5 s" in record["model"]["detail"]
    assert "goal_check" not in report.values["usage"]["calls_by_role"]  # no answer, no tokens: only the attempt's circuit count
