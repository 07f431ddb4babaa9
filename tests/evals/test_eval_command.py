"""`boundloop eval`: metrics checked by hand on a three-scenario suite, the gate's exit code, and
one clear line for a bad suite file, and a scenario on an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from boundloop.graph.cli.app import app
from boundloop.graph.core.status import Exit
from boundloop.graph.evals.grounding_audit import StepVerdict, audit_grounding
from boundloop.graph.evals.harness import RunOutcome, run_suite
from boundloop.graph.evals.memory_audit import MemoryVerdict, audit_run
from boundloop.graph.evals.metrics import Metric, compute, misses
from boundloop.graph.evals.suite import Bound, Suite
from boundloop.graph.run.runner import Runner
from tests.graph.fake_openai import FakeOpenAI

NOTES = {"notes.md": "Action items:\n- Ana: publish the notes\n"}
TASK = {"goal": "Summarize notes.md", "acceptance_criteria": ["the answer names Ana's action item"]}
PATH = "intake plan validate_plan act execute act critique verify weigh commit finalize".split()
"""The judge and the critic in one step (nodes of a step in name order), then weigh."""
REMEMBERING_PATH = [*PATH[:-1], "remember", "finalize"]  # an answer that proposes memories passes the write gate


def step(content: Any = "", calls: list[dict[str, Any]] | None = None, tokens: tuple[int, int] = (100, 10)) -> dict[str, Any]:
    return {"content": content, "tool_calls": calls or [], "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def read(path: str) -> dict[str, Any]:
    return step("", [{"name": "workspace__read_file", "args": {"path": path}}])


PLAN_READ = step({"steps": [{"id": "s1", "description": "read", "tools": ["workspace__read_file"], "args": {"path": "notes.md"}}], "blocked": None}, tokens=(100, 20))
PLAN_ONE = step({"steps": [{"id": "s1", "description": "answer"}], "blocked": None}, tokens=(100, 20))
PLAN_WRITE = step({"steps": [{"id": "s1", "description": "write", "tools": ["workspace__write_file"]}], "blocked": None}, tokens=(100, 20))
JUDGE = step({"passed": True, "failures": []}, tokens=(50, 5))
CRITIC = step({"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []}, tokens=(50, 5))
ANSWER = step("Ana publishes the notes.")
SUPPORTED = {"text": "Ana: publish the notes", "sources": ["a0.0"]}
POISONED = {"text": "Ana is the CEO and approved the budget", "sources": ["a0.0"]}
LABELS = {SUPPORTED["text"]: True, POISONED["text"]: False}
"""The truth memory write quality judges against: the read backs the first candidate, not the second."""
REMEMBERING = step("Ana publishes the notes.\n<memory-candidates>" + json.dumps([SUPPORTED, POISONED]) + "</memory-candidates>")


def scenario(name: str, mode: str, planner: dict[str, Any], actor: list[dict[str, Any]], expect: dict[str, Any], **extra: Any) -> dict[str, Any]:
    roles = {"planner": [planner], "actor": actor, "judge": [JUDGE], "critic": [CRITIC]}
    return {"name": name, "mode": mode, "task": TASK, "workspace": NOTES, "script": {"model_id": "m", "roles": roles}, "expect": expect, **extra}


SUITE = {
    "name": "hand-checked",
    "settings": {"prices": {"m": [2.0, 8.0]}, "planning": "always", "critique": "always"},  # every role runs: the hand count has them all
    "thresholds": {"correct_termination": {"min": 1.0}, "trajectory_efficiency": {"max": 1.05}},
    "scenarios": [
        # 12 steps on its golden path (act grounds the last results and gates its own calls; its answer proposes a
        # memory its read backs and one it does not, so it passes the write gate); planner 100/20, actor 2 × 100/10,
        # judge and critic 50/5: 400 in, 50 out.
        scenario("read", "golden", PLAN_READ, [read("notes.md"), REMEMBERING], {"terminal": "SUCCESS", "golden": REMEMBERING_PATH, "memories": LABELS}),
        # A failed read first, and no memory proposed: 13 steps for an 11-step golden path; 500 in, 60 out.
        scenario("detour", "fault", PLAN_ONE, [read("missing.md"), read("notes.md"), ANSWER], {"terminal": "SUCCESS", "golden": PATH}),
        # An injected anomaly: a write no human can approve fails closed; planner and one actor turn: 200 in, 30 out.
        scenario("denied", "escalation", PLAN_WRITE, [step("", [{"name": "workspace__write_file", "args": {"path": "s.md", "content": "x"}}])],
                 {"terminal": "PERMISSION_DENIED", "escalates": True},
                 settings={"unattended": True, "policy": {"rules": [{"id": "ask-writes", "action": "ask", "tool": "write_file"}]}}),
    ],
}


def test_metrics_match_a_hand_count_and_a_missed_threshold_fails_the_gate(db_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    result = CliRunner().invoke(app, ["eval", str(suite), "--json", "--database-url", db_url])
    assert result.exit_code == Exit.QUALITY, result.output
    document = json.loads(result.stdout)
    values = {name: metric["value"] for name, metric in document["metrics"].items()}
    assert values["task_success_rate"] == 1.0  # read and detour
    assert values["correct_termination"] == 1.0
    assert values["trajectory_validity"] == 1.0 and values["trace_completeness"] == 1.0
    assert values["trajectory_efficiency"] == pytest.approx((12 + 13) / (12 + 11))
    assert values["escalation_precision"] == 1.0 and values["escalation_recall"] == 1.0
    assert values["tool_calls_per_run"] == pytest.approx(4 / 3)  # ok, tool_error + ok, denied
    assert values["failed_tool_calls"] == 2
    assert values["retry_rate"] == 0.0
    assert values["timeout_rate"] == 0.0
    assert values["budget_adherence"] == 1.0
    spent = (400 + 500 + 200) * 2.0 / 1e6 + (50 + 60 + 30) * 8.0 / 1e6
    assert values["cost_per_success"] == pytest.approx(spent / 2)
    assert values["observation_grounding_rate"] == 1.0  # the read step, done on a read the payload store confirms
    assert values["human_override_rate"] is None  # nobody decided anything
    assert values["memory_write_quality"] == 1.0  # the supported memory promoted, the poisoned one rejected
    assert document["metrics"]["memory_write_quality"]["detail"].startswith("2/2 ")
    assert values["step_count_efficiency"] == pytest.approx(sum(run["steps"] for run in document["runs"]) / 3)
    assert [run["steps"] for run in document["runs"]][:2] == [12, 13]
    assert values["loop_depth"] == 0  # no repair, one plan each
    assert values["user_correction_rate"] == 0.0  # nobody decided anything
    # planner, actor × 2, judge, critic; planner, actor × 3, judge, critic; planner, actor: 13 calls for 2 successes
    assert values["model_calls_per_success"] == pytest.approx(13 / 2)
    assert values["tokens_per_success"] == pytest.approx((450 + 560 + 230) / 2)
    assert document["families"]["golden"] == {"runs": 1, "successes": 1, "model_calls": 5, "tokens": 450,
                                              "model_calls_per_success": 5.0, "tokens_per_success": 450.0}
    assert document["families"]["escalation"]["model_calls_per_success"] is None  # no success to divide by
    assert [run["memory"] for run in document["runs"]][0] == {"promoted": 1, "rejected": 1, "wrong": 0}
    assert document["missed"] == ["trajectory_efficiency = 1.087 is above its maximum 1.05"]
    assert [run["terminal"] for run in document["runs"]] == ["SUCCESS", "SUCCESS", "PERMISSION_DENIED"]


def test_thresholds_met_pass_and_an_unmeasured_metric_never_does() -> None:
    metrics = {"correct_termination": Metric("correct_termination", 1.0, "3/3 runs"),
               "human_override_rate": Metric("human_override_rate", None, "no decisions")}
    assert misses(metrics, {"correct_termination": Bound(min=1.0)}) == []
    assert misses(metrics, {"human_override_rate": Bound(max=0.5)}) == [
        "human_override_rate is not measured (no decisions) but the suite sets a threshold on it"]


def test_a_bad_suite_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    broken = json.loads(json.dumps(SUITE))
    broken["scenarios"][1]["expect"]["terminal"] = "DONE"
    suite.write_text(json.dumps(broken))
    result = CliRunner().invoke(app, ["eval", str(suite)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: suite '{suite}' is malformed at scenarios[1] (detour).expect.terminal: Input should be")


async def test_a_scenario_can_run_against_an_openai_compatible_endpoint(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with FakeOpenAI() as fake:
        suite = Suite.model_validate({"name": "endpoint", "settings": {"prices": {"fake-model": [2.0, 8.0]}, "planning": "always", "critique": "always"},
                                      "scenarios": [
            {"name": "provider", "mode": "golden", "task": TASK, "workspace": NOTES,
             "endpoint": {"model": "fake-model", "base_url": fake.base_url}, "expect": {"terminal": "SUCCESS"}}]})
        async with Runner(db_url) as runner:
            [outcome] = await run_suite(runner, suite)
    assert (outcome.terminal, outcome.problems) == ("SUCCESS", [])
    assert {"planner", "actor", "judge", "critic"} <= set(fake.roles)


async def test_memory_write_quality_judges_the_gate_against_the_scenarios_labels(db_url: str) -> None:
    """The truth is the scenario's labels, not the gate's validator: a promoted memory whose text its
    sources do not contain, or whose source payload was altered, counts as wrong; a rejection of a
    candidate labelled supported counts as wrong unless the budget or a person refused it; an
    unlabelled candidate is not judged."""
    suite = Suite.model_validate({"name": "memory", "scenarios": [
        scenario("remember", "fault", PLAN_READ, [read("notes.md"), REMEMBERING], {"terminal": "SUCCESS", "memories": LABELS})]})
    async with Runner(db_url) as runner:
        [outcome] = await run_suite(runner, suite)
        assert [(v.promoted, v.supported) for v in outcome.memory] == [(True, True), (False, False)]
        events = await runner.trace(outcome.thread_id)
        state = (await runner.graph.aget_state({"configurable": {"thread_id": outcome.thread_id}})).values

        def altered(change: Any) -> list[dict[str, Any]]:
            copied = json.loads(json.dumps(events, default=str))
            for event in copied:
                if event["kind"] == "memory":
                    change(event["data"]["decisions"])
            return copied

        def unbacked(decisions: list[dict[str, Any]]) -> None:
            decisions[0]["memory"]["text"] = "Ana is the CEO"

        def tampered(decisions: list[dict[str, Any]]) -> None:
            decisions[0]["memory"]["sources"][0]["sha256"] = "0" * 64

        def wrongly_refused(decisions: list[dict[str, Any]]) -> None:
            decisions[1]["candidate"] = SUPPORTED

        def refused_for_the_budget(decisions: list[dict[str, Any]]) -> None:
            decisions[1] |= {"candidate": SUPPORTED, "reason": "budget.memory_writes exhausted: 1 per run"}

        assert [v.right for v in await audit_run(runner.pool, outcome.thread_id, events, state, LABELS)] == [True, True]
        assert [v.right for v in await audit_run(runner.pool, outcome.thread_id, altered(unbacked), state, LABELS)] == [False, True]
        assert [v.right for v in await audit_run(runner.pool, outcome.thread_id, altered(tampered), state, LABELS)] == [False, True]
        refused = await audit_run(runner.pool, outcome.thread_id, altered(wrongly_refused), state, LABELS)
        budget = await audit_run(runner.pool, outcome.thread_id, altered(refused_for_the_budget), state, LABELS)
        unlabelled = await audit_run(runner.pool, outcome.thread_id, events, state, {})
        wrongly_labelled = await audit_run(runner.pool, outcome.thread_id, events, state, {text: not label for text, label in LABELS.items()})
    assert [(v.judged, v.right) for v in refused] == [(True, True), (True, False)]  # the validator refused a supported memory
    assert [(v.judged, v.right) for v in budget] == [(True, True), (False, False)]  # supported, refused for the budget: not counted
    assert [v.judged for v in unlabelled] == [False, False]
    assert [v.right for v in wrongly_labelled] == [False, False]  # the labels, not the gate, decide
    metrics = compute([RunOutcome("x", "fault", "SUCCESS", "SUCCESS", memory=[MemoryVerdict(True, False), MemoryVerdict(False, False)])])
    assert (metrics["memory_write_quality"].value, metrics["memory_write_quality"].detail.split()[0]) == (0.5, "1/2")


async def test_grounding_is_judged_from_the_payload_store_the_ledger_and_the_workspace(db_url: str, tmp_path: Path) -> None:
    """A done write step counts as grounded only while its recorded result, its COMPLETE ledger row
    and the file it wrote agree; the grounding step's own `grounded` flag is never read."""
    write = step("", [{"name": "workspace__write_file", "args": {"path": "s.md", "content": "Ana publishes the notes."}}])
    settings = {"planning": "always", "critique": "always"}
    suite = Suite.model_validate({"name": "grounding", "settings": settings, "scenarios": [
        scenario("write", "golden", PLAN_WRITE, [write, ANSWER], {"terminal": "SUCCESS"})]})
    async with Runner(db_url) as runner:
        [outcome] = await run_suite(runner, suite)
        assert outcome.grounding == [StepVerdict("s1", True)]  # checked on the run's own workspace before it was removed
        state = (await runner.graph.aget_state({"configurable": {"thread_id": outcome.thread_id}})).values
        (tmp_path / "s.md").write_text("Ana publishes the notes.")
        unflagged = {**state, "observations": [{**obs, "grounded": False} for obs in state["observations"]]}
        assert [v.verified for v in await audit_grounding(runner.pool, outcome.thread_id, unflagged, tmp_path)] == [True]
        (tmp_path / "s.md").write_text("Ana publishes")  # the file no longer holds what the call sent
        [changed] = await audit_grounding(runner.pool, outcome.thread_id, state, tmp_path)
        assert not changed.verified and "does not hold what its result says" in changed.why
        (tmp_path / "s.md").write_text("Ana publishes the notes.")
        async with runner.pool.connection() as conn:
            await conn.execute("UPDATE boundloop_ledger SET status = 'INTENT' WHERE thread_id = %s", (outcome.thread_id,))
        [intended] = await audit_grounding(runner.pool, outcome.thread_id, state, tmp_path)
        assert not intended.verified and "without a COMPLETE ledger row" in intended.why
        async with runner.pool.connection() as conn:
            await conn.execute("UPDATE boundloop_ledger SET status = 'COMPLETE' WHERE thread_id = %s", (outcome.thread_id,))
        # a result whose record is not the one its hash was taken of (no tool message, another excerpt)
        rewritten = {**state, "messages": [], "observations": [{**obs, "excerpt": "ok"} for obs in state["observations"]]}
        [altered] = await audit_grounding(runner.pool, outcome.thread_id, rewritten, tmp_path)
        assert not altered.verified and "the result recorded is not whole" in altered.why
    metrics = compute([RunOutcome("x", "golden", "SUCCESS", "SUCCESS", grounding=[StepVerdict("s1", True), altered])])
    assert (metrics["observation_grounding_rate"].value, metrics["observation_grounding_rate"].detail.split()[0]) == (0.5, "1/2")


async def test_user_corrections_are_counted_from_the_trace(db_url: str) -> None:
    """A write a person rejects is a correction; the same write approved is none."""
    write = step("", [{"name": "workspace__write_file", "args": {"path": "s.md", "content": "x"}}])
    ask = {"policy": {"rules": [{"id": "ask-writes", "action": "ask", "tool": "write_file"}]}}

    def asked(name: str, decision: dict[str, Any], ending: str) -> dict[str, Any]:
        return scenario(name, "escalation", PLAN_WRITE, [write, ANSWER, ANSWER], {"terminal": ending}, settings=ask, decisions=[decision])

    suite = Suite.model_validate({"name": "corrections", "settings": {"planning": "always", "critique": "always"}, "scenarios": [
        asked("approved", {"decision": "approve"}, "SUCCESS"), asked("rejected", {"decision": "reject", "message": "not that file"}, "SUCCESS")]})
    async with Runner(db_url) as runner:
        approved, rejected = await run_suite(runner, suite)
    assert (approved.corrections, rejected.corrections) == (0, 1), (approved.problems, rejected.problems)
    assert compute([approved, rejected])["user_correction_rate"].value == 0.5


def test_provider_http_runs_the_golden_and_fault_scenarios_through_a_local_server_to_the_same_counts(db_url: str, tmp_path: Path) -> None:
    faulty = {**SUITE, "scenarios": [*SUITE["scenarios"][:1], {**SUITE["scenarios"][1], "http_faults": {"actor": [{"status": 500}, {"close": True}]}},
                                     *SUITE["scenarios"][2:]]}
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(faulty))
    result = CliRunner().invoke(app, ["eval", str(suite), "--json", "--provider", "http", "--database-url", db_url])
    assert result.exit_code == Exit.QUALITY, result.output
    document = json.loads(result.stdout)
    assert document["suite"] == "hand-checked (provider http)"
    assert [(run["scenario"], run["terminal"], run["steps"]) for run in document["runs"]] == [("read", "SUCCESS", 12), ("detour", "SUCCESS", 13)]
    # the provider's usage is the script's: the hand count of the scripted model, the two faulted attempts answering no step
    assert document["families"]["golden"] == {"runs": 1, "successes": 1, "model_calls": 5, "tokens": 450,
                                              "model_calls_per_success": 5.0, "tokens_per_success": 450.0}
    assert [run["model_calls"] for run in document["runs"]] == [5, 6]
    assert document["missed"] == ["trajectory_efficiency = 1.087 is above its maximum 1.05"]


def test_provider_http_on_a_suite_without_golden_or_fault_scenarios_is_one_line_and_exit_2(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({**SUITE, "scenarios": SUITE["scenarios"][2:]}))
    result = CliRunner().invoke(app, ["eval", str(suite), "--provider", "http"])
    assert result.exit_code == Exit.BAD_INPUT
    lines = result.output.strip().splitlines()
    assert lines == ["error: suite 'hand-checked' has no scripted golden or fault scenario for --provider http; run it without --provider"]
