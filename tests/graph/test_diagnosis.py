"""Root-cause classification, strategy choice and its escalation, convergence and the goal check, as
pure functions over the records the real verify, critique and observe nodes write."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from boundloop.graph.quality import convergence
from boundloop.graph.quality.diagnosis import defects, plan_round
from boundloop.graph.quality.test_results import test_failures as located_test_failures
from boundloop.nodes.critique import CriticReply, score
from boundloop.nodes.verify import check_failure, schema_failures

SCHEMA = {"type": "object", "required": ["owner"], "properties": {"owner": {"type": "string"}}}
TEST_REPORT = {"passed": 0, "failed": 1, "errors": 0,
               "failures": [{"name": "test_calc.test_add", "location": "test_calc.py:5", "expected": "3", "actual": "-1"}]}


def _check_failure(status: str, output: str, **check) -> dict:
    reason, cause = check_failure({"name": "check", "tool": "t__x", **check}, status, output)
    return {"criterion": "check", "reason": reason, "cause": cause.value}


def _critic(defect: dict, scores: dict | None = None) -> dict:
    reply = CriticReply.model_validate({"scores": scores or {"correctness": 0.5, "completeness": 0.9, "coherence": 0.9, "safety": 1},
                                        "defects": [defect]})
    return score(reply, verified=True)


CASES = [
    # (what found it, verification failures, critique, unfinished steps) → (class, strategy)
    ("schema check", schema_failures('{"who": "Ana"}', SCHEMA), {}, [], "SCHEMA_VIOLATION", "FULL_REGENERATION"),
    ("answer not JSON", schema_failures("Ana", SCHEMA), {}, [], "SCHEMA_VIOLATION", "FULL_REGENERATION"),
    ("failing test", [{**f, "cause": "LOGIC_ERROR"} for f in located_test_failures({"name": "tests"}, TEST_REPORT)], {}, [],
     "LOGIC_ERROR", "MINIMAL_EDIT"),
    ("wrong exit code", [_check_failure("ok", '{"exit_code": 1}', expect_exit_code=0)], {}, [], "LOGIC_ERROR", "SECTION_REWRITE"),
    ("artifact lacks text", [_check_failure("ok", "notes", expect_contains="Ana")], {}, [], "INCOMPLETENESS", "SECTION_REWRITE"),
    ("tool error in a check", [_check_failure("error", "no such file")], {}, [], "TOOL_FAILURE", "RETRY_TOOL"),
    ("judge's unmet criterion", [{"criterion": "owner", "reason": "owner missing"}], {}, [], "INCOMPLETENESS", "SECTION_REWRITE"),
    ("critic: located factual error", [], _critic({"problem": "wrong date", "location": "line 2", "root_cause": "FACTUAL_ERROR"}), [],
     "FACTUAL_ERROR", "MINIMAL_EDIT"),
    ("critic: unlocated factual error", [], _critic({"problem": "wrong date", "root_cause": "FACTUAL_ERROR"}), [],
     "FACTUAL_ERROR", "SECTION_REWRITE"),
    ("critic: hallucination", [], _critic({"problem": "invented", "location": "para 1", "root_cause": "HALLUCINATION"}), [],
     "HALLUCINATION", "MINIMAL_EDIT"),
    ("critic: incoherence", [], _critic({"problem": "says both", "location": "para 1", "root_cause": "COHERENCE_FAILURE"}), [],
     "COHERENCE_FAILURE", "SECTION_REWRITE"),
    ("critic: unsafe content", [], _critic({"problem": "a key", "location": "line 3", "root_cause": "SAFETY_VIOLATION"}), [],
     "SAFETY_VIOLATION", "MINIMAL_EDIT"),
    ("critic: too little evidence", [], _critic({"problem": "one source", "root_cause": "RETRIEVAL_GAP"}), [], "RETRIEVAL_GAP", "RE_RETRIEVE"),
    ("critic: tool misread", [], _critic({"problem": "empty result used", "root_cause": "TOOL_FAILURE"}), [], "TOOL_FAILURE", "RETRY_TOOL"),
    ("critic: code bug", [], _critic({"problem": "off by one", "location": "calc.py:3", "root_cause": "LOGIC_ERROR"}), [],
     "LOGIC_ERROR", "MINIMAL_EDIT"),
    ("critic: unclassified defect takes its worst dimension", [], _critic({"problem": "vague"}), [], "FACTUAL_ERROR", "SECTION_REWRITE"),
    ("rubric only, no defects", [], {"scores": {"safety": 0.5}, "below_minimum": ["safety"], "defects": []}, [],
     "SAFETY_VIOLATION", "SECTION_REWRITE"),
    ("plan step whose call failed", [], {}, [{"id": "s1", "description": "read", "failure": "workspace__read_file (a0.0) error"}],
     "TOOL_FAILURE", "RETRY_TOOL"),
    ("plan step never done", [], {}, [{"id": "s1", "description": "read"}], "INCOMPLETENESS", "SECTION_REWRITE"),
    ("nothing stated", [], {}, [], "LOGIC_ERROR", "SECTION_REWRITE"),
]


@pytest.mark.parametrize(("found_by", "failures", "critique", "steps", "cause", "strategy"), CASES, ids=[case[0] for case in CASES])
def test_each_defect_gets_its_root_cause_and_the_strategy_that_class_calls_for(found_by, failures, critique, steps, cause, strategy):
    [defect] = defects({"failures": failures[:1]}, critique, steps)
    planned, chosen = plan_round([defect], [])
    assert (planned[0]["cause"], planned[0]["strategy"], chosen) == (cause, strategy, strategy)


def test_a_failing_test_reaches_the_diagnosis_with_its_location_expected_and_actual():
    failures = [{**f, "cause": "LOGIC_ERROR"} for f in located_test_failures({"name": "tests"}, TEST_REPORT)]
    [defect] = defects({"failures": failures}, {}, [])
    assert {key: defect[key] for key in ("location", "expected", "actual", "test")} == {
        "location": "test_calc.py:5", "expected": "3", "actual": "-1", "test": "test_calc.test_add"}


def test_a_critic_naming_a_class_outside_the_taxonomy_is_refused():
    with pytest.raises(ValidationError, match="root_cause"):
        CriticReply.model_validate({"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1},
                                    "defects": [{"problem": "x", "root_cause": "BAD_VIBES"}]})


@pytest.mark.parametrize(("cause", "location", "ladder"), [
    ("LOGIC_ERROR", "calc.py:3", ["MINIMAL_EDIT", "SECTION_REWRITE", "REPLAN", "HUMAN", "HUMAN"]),
    ("INCOMPLETENESS", None, ["SECTION_REWRITE", "REPLAN", "HUMAN"]),
    ("SCHEMA_VIOLATION", None, ["FULL_REGENERATION", "REPLAN", "HUMAN"]),
    ("RETRIEVAL_GAP", None, ["RE_RETRIEVE", "REPLAN", "HUMAN"]),
    ("TOOL_FAILURE", None, ["RETRY_TOOL", "REPLAN", "HUMAN"]),
])
def test_the_same_class_recurring_climbs_the_strategy_ladder(cause, location, ladder):
    defect = {"cause": cause, "location": location, "problem": "p"}
    history: list[dict] = []
    climbed = []
    for _ in ladder:
        planned, strategy = plan_round([defect], history)
        climbed.append(strategy)
        history.append({"diagnosis": planned})
    assert climbed == ladder


def test_another_class_does_not_escalate_and_the_round_takes_the_strongest_strategy():
    history = [{"diagnosis": [{"cause": "FACTUAL_ERROR"}]}]
    planned, strategy = plan_round([{"cause": "LOGIC_ERROR", "location": "x:1", "problem": "p"},
                                    {"cause": "RETRIEVAL_GAP", "location": None, "problem": "q"}], history)
    assert [d["strategy"] for d in planned] == ["MINIMAL_EDIT", "RE_RETRIEVE"] and strategy == "RE_RETRIEVE"


@pytest.mark.parametrize(("verification", "critique", "expected"), [
    ({"passed": True}, {"scores": {"x": 1}, "weighted": 0.9}, 0.95),
    ({"passed": False}, {"scores": {"x": 1}, "weighted": 0.9}, 0.45),
    ({"passed": False, "tests": {"passed": 1, "failed": 2, "errors": 1}}, {"scores": {"x": 1}, "weighted": 0.8}, 0.525),
    ({"passed": False, "tests": {"passed": 0, "failed": 0, "errors": 0}}, {}, 0.0),
    ({"passed": False}, {"unusable": "critic gave prose", "weighted": 0.0, "scores": {}}, 0.0),
])
def test_the_quality_score_combines_critic_and_verification(verification, critique, expected):
    assert convergence.quality_score(verification, critique) == expected


@pytest.mark.parametrize(("scores", "window", "stalled"), [
    ([0.5, 0.5, 0.5], 2, True),
    ([0.6, 0.5, 0.4], 2, True),
    ([0.5, 0.5, 0.503], 2, True),  # within MIN_GAIN: noise, not progress
    ([0.5, 0.4, 0.6], 2, False),
    ([0.5, 0.5], 2, False),  # not enough iterations to judge
    ([0.5, 0.5, 0.5, 0.5], 0, False),  # off
    ([0.5, 0.5], 1, True),
])
def test_a_loop_stalls_when_the_last_window_never_beats_the_best_before_it(scores, window, stalled):
    history = [{"iteration": n, "turn": n, "score": value} for n, value in enumerate(scores)]
    assert convergence.stalled(history, window) is stalled


def test_the_best_output_is_kept_not_the_last_and_ties_go_to_the_newer():
    quality: dict = {}
    for n, (weighted, output) in enumerate([(0.6, "one"), (0.9, "two"), (0.5, "three"), (0.9, "four")]):
        quality = convergence.record({**quality, "verification": {"passed": False, "output": output},
                                      "critique": {"scores": {"x": 1}, "weighted": weighted}}, iteration=n, turn=n + 1)
    assert quality["best"] == {"iteration": 3, "score": 0.45, "output": "four"}
    assert [entry["score"] for entry in quality["scores"]] == [0.3, 0.45, 0.25, 0.45]
