"""The confidence function's table of cases (graph/quality/confidence.py) and the approval triggers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from boundloop.graph.quality.confidence import Signals, estimate, evidence_coverage, review_triggers
from boundloop.nodes.critique import Scores


def signals(**given) -> Signals:
    return Signals(**{"critic": None, "verification": None, "tests": None, "evidence": None, "consistency": None, "repairs": 0, **given})


@pytest.mark.parametrize(("given", "expected"), [
    ({"critic": 1.0, "verification": 1.0}, 1.0),
    ({"critic": 1.0, "verification": 1.0, "repairs": 1}, 0.95),
    ({"critic": 0.7875, "verification": 1.0}, 0.876),
    ({"critic": 1.0, "verification": 0.0}, 0.5833),
    ({"critic": 1.0, "verification": 1.0, "tests": 0.5}, 0.875),
    ({"critic": 1.0, "verification": 1.0, "tests": 1.0, "evidence": 0.0}, 0.8889),
    ({"critic": 1.0, "verification": 1.0, "consistency": 0.6}, 0.9429),
    ({"critic": 0.9, "verification": 0.5, "tests": 1.0, "evidence": 1.0, "consistency": 1.0}, 0.84),
    ({"critic": 1.0, "verification": 1.0, "repairs": 30}, 0.0),
    ({}, 0.0),
])
def test_the_documented_weighted_mean_less_the_repair_penalty(given, expected):
    assert estimate(signals(**given)) == expected


def test_evidence_coverage_counts_claims_with_data_found_in_successful_observations():
    observations = [{"status": "ok", "excerpt": "Owner: Ana. Due 2026-12-01. File notes.md"},
                    {"status": "tool_error", "excerpt": "budget 4000"}]
    output = "The owner is Ana. It is due 2026-12-01. The budget is 4000. Everything is fine."
    assert evidence_coverage(output, observations) == 0.5  # the budget figure came only from a failed call
    assert evidence_coverage("Everything is fine.", observations) is None


def _state(**given):
    return {"settings": {}, "task": {}, "quality": {}, "observations": [], "approvals": [], **given}


def test_an_irreversible_effect_no_human_approved_sends_the_result_to_review():
    effect = {"call_id": "a1.0", "tool": "tickets__close", "reversibility": "irreversible", "status": "ok", "phase": "act"}
    check = {**effect, "call_id": "v1.0", "tool": "sandbox__run_tests", "phase": "verify"}
    on = {"review_unapproved_irreversible": True}
    assert review_triggers(_state(observations=[effect, check])) == []  # off by default: the policy decided before the call
    assert review_triggers(_state(settings=on, observations=[effect, check])) == ["irreversible effects no human approved: tickets__close"]
    approved = _state(settings=on, observations=[effect], approvals=[{"call_id": "a1.0", "decision": "approve", "run": True}])
    assert review_triggers(approved) == []
    failed = {**effect, "status": "tool_error"}
    assert review_triggers(_state(settings=on, observations=[failed])) == []


def test_a_low_safety_score_and_a_task_flag_are_triggers_too():
    state = _state(quality={"critique": {"scores": {"safety": 0.96}}}, task={"require_result_approval": True})
    assert review_triggers(state) == ["safety score 0.96 is below 0.98", "the task asks for the result to be approved"]


async def test_judge_samples_vote_and_their_agreement_is_a_signal(run_script):
    from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, step

    judge_fail = {"content": {"passed": False, "failures": [{"criterion": "owner", "reason": "missing"}]}, "usage": {"input_tokens": 5, "output_tokens": 5}}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("Ana publishes the notes.")], "judge": [JUDGE_PASS, judge_fail, JUDGE_PASS],
         "critic": [CRITIC_PASS]},
        task={"acceptance_criteria": ["names the owner"]}, judge_samples=3,
    )
    verification = report.values["quality"]["verification"]
    assert (verification["passed"], verification["consistency"]) == (True, 0.6667)
    assert report.values["usage"]["calls_by_role"]["judge"] == 3
    assert report.values["quality"]["confidence_signals"]["consistency"] == 0.6667


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 1.5, -0.1, "high", None])
def test_a_critic_score_that_is_not_a_number_in_0_to_1_is_refused_before_it_can_reach_the_confidence(bad):
    """The critic's reply is validated at parse time: a NaN or out-of-range score is a malformed reply,
    never a signal (a NaN would otherwise survive the clamp in `estimate`: min/max keep it)."""
    with pytest.raises(ValidationError):
        Scores(correctness=bad, completeness=1.0, coherence=1.0, safety=1.0)
