"""The loop end to end in-process: real Postgres, the real workspace MCP server, the real graph."""

from __future__ import annotations

import hashlib
import json

import pytest
from langchain_core.messages import ToolMessage

from boundloop.graph.core.errors import RunStopped
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, PLAN_READ_NOTES, READ_NOTES, step

FINAL = step("Ana publishes the notes.")


def _tool_messages(report):
    return [message for message in report.values["messages"] if isinstance(message, ToolMessage)]


async def _finalize_events(runner, report):
    return [event for event in await runner.trace(report.thread_id) if event["node"] == "finalize"]


async def test_a_task_plans_acts_verifies_and_commits_with_a_hash_and_provenance(run_script, runner):
    """One read, a final answer, judge and critic pass: SUCCESS with exactly one terminal status. The task
    asks for a plan and a critique, so every phase of the loop runs."""
    report = await run_script(
        {"planner": [PLAN_READ_NOTES], "actor": [step(calls=[READ_NOTES]), FINAL], "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]},
        task={"acceptance_criteria": ["names the owner"]}, planning="always", critique="always",
    )
    assert report.status == Terminal.SUCCESS
    result = report.result
    assert result["sha256"] == hashlib.sha256(b"Ana publishes the notes.").hexdigest()
    assert result["provenance"]["plan_hash"] and result["provenance"]["model"] == "scripted-test"
    provenance = dict(result["provenance"])
    sealed = provenance.pop("sha256")
    assert sealed == hashlib.sha256(json.dumps(provenance, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert provenance["verification"] == {"passed": True, "failures": [], "accepted_by": None}
    assert provenance["committed_at"].endswith("+00:00") and provenance["approvers"] == []
    assert [obs["stage"] for obs in report.values["observations"]] == ["committed"]
    assert report.values["plan"]["steps"][0]["status"] == "done"
    assert len(await _finalize_events(runner, report)) == 1


async def test_every_tool_call_gets_exactly_one_result_even_unknown_tools_and_bad_arguments(run_script):
    """Unknown tool and invalid arguments are structured error results the model reads."""
    calls = [{"name": "nope__tool", "args": {}}, {"name": "workspace__read_file", "args": {"path": 7}}, READ_NOTES]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=calls), FINAL], "critic": [CRITIC_PASS]}
    )
    assert report.status == Terminal.SUCCESS
    results = _tool_messages(report)
    assert sorted(message.tool_call_id for message in results) == ["call_actor_0_0", "call_actor_0_1", "call_actor_0_2"]
    assert results[0].content.startswith("unknown_tool: no tool 'nope__tool'; available: [")
    assert results[1].content.startswith("invalid_arguments: workspace__read_file:")
    statuses = {obs["call_id"]: obs["status"] for obs in report.values["observations"]}
    assert statuses == {"a0.0": "unknown_tool", "a0.1": "invalid_arguments", "a0.2": "ok"}


async def test_model_turns_trip_exactly_at_the_bound(run_script):
    """With model_turns=2: two actor turns run, the third never happens."""
    report = await run_script(
        {"actor": [step(calls=[READ_NOTES]), step(calls=[{"name": "workspace__list_files", "args": {}}])]},
        task={"budget": {"model_turns": 2}}, unattended=True,
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["usage"]["model_turns"] == 2
    assert report.values["ending"]["reason"] == "budget.model_turns exhausted: 2 of 2 used."
    assert "--budget model_turns=4" in report.values["ending"]["next_safe_action"]
    assert report.result["kind"] == "failure" and len(_tool_messages(report)) == 2


async def test_the_fourth_tool_call_under_a_budget_of_three_is_refused_before_dispatch(run_script):
    """The gate refuses call 4; the run keeps its three observations and ends BUDGET_EXHAUSTED."""
    reads = [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": n}} for n in (10, 20, 30, 40)]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=reads)]}, task={"budget": {"tool_calls": 3}}, unattended=True
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    statuses = [obs["status"] for obs in report.values["observations"]]
    assert statuses == ["ok", "ok", "ok", "budget_exceeded"]
    assert report.values["usage"]["tool_calls"] == 3
    refused = {m.tool_call_id: m.content for m in _tool_messages(report)}["call_actor_0_3"]
    assert refused == "budget_exceeded: budget.tool_calls exhausted: 3 of 3 used. The call was not made."


@pytest.mark.parametrize(("dimension", "limit"), [("input_tokens", 300), ("output_tokens", 30)])
async def test_token_budgets_trip_at_the_bound_from_usage_metadata(run_script, dimension, limit):
    """Each call reports 100 input / 10 output tokens; a call whose measured request would pass the
    bound is not made: the run stops at the bound, never past it."""
    report = await run_script(
        {"planner": [step(PLAN_ONE_STEP["content"])], "actor": [step(calls=[READ_NOTES]), step(calls=[READ_NOTES]), step(calls=[READ_NOTES])]},
        task={"budget": {dimension: limit}}, unattended=True,
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == dimension
    assert report.values["usage"][dimension] <= limit


async def test_the_cost_budget_trips_from_the_price_table(run_script):
    """At $1 per million input tokens a $0.0002 budget is reserved against each measured request: the
    run stops when the next request's input would pass it, never past it."""
    report = await run_script(
        {"planner": [step(PLAN_ONE_STEP["content"])], "actor": [step(calls=[READ_NOTES]), step(calls=[READ_NOTES])]},
        task={"budget": {"cost_usd": 0.0002}},
        prices={"scripted-test": (1.0, 0.0)}, unattended=True,
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "cost_usd"
    assert report.values["usage"]["cost_usd"] <= 0.0002


async def test_a_model_without_a_price_stops_a_cost_budgeted_run_before_any_spend(run_script, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    report = await run_script({}, task={"budget": {"cost_usd": 1.0}}, model="unpriced-model-x", script=None, unattended=True)
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["reason"] == "budget.cost_usd cannot be computed: no price for model 'unpriced-model-x'."
    assert report.values["usage"]["model_turns"] == 0


async def test_a_wall_clock_budget_ends_the_run_as_timeout(run_script):
    report = await run_script({"planner": [PLAN_ONE_STEP]}, task={"budget": {"wall_clock_s": 0.000001}}, unattended=True)
    assert report.status == Terminal.TIMEOUT
    assert report.values["usage"]["model_turns"] == 0


async def test_a_failed_verification_is_repaired_then_committed(run_script):
    """The judge fails the first answer, the critic names the defect, the repaired answer commits."""
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    critic_fail = step({"scores": {"correctness": 0.5, "completeness": 0.5, "coherence": 0.9, "safety": 1}, "defects": [{"problem": "no owner"}]})
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("publish the notes"), FINAL], "judge": [judge_fail, JUDGE_PASS], "critic": [critic_fail, CRITIC_PASS]},
        task={"acceptance_criteria": ["names the owner"]},
    )
    assert report.status == Terminal.SUCCESS
    assert report.values["usage"]["repairs"] == 1
    feedback = [m for m in report.values["messages"] if m.type == "human"]
    diagnosis = json.loads(feedback[0].content.split("Diagnosis (JSON):\n", 1)[1])
    assert [(d["cause"], d["problem"]) for d in diagnosis] == [("INCOMPLETENESS", "owner: owner missing"), ("FACTUAL_ERROR", "no owner")]
    assert report.result["confidence"] == 0.95  # weighted 1.0 minus 0.05 for one repair


async def test_repairs_are_bounded_and_the_partial_output_is_kept(run_script):
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two")], "judge": [judge_fail, judge_fail], "critic": [CRITIC_FAIL, CRITIC_FAIL]},
        task={"acceptance_criteria": ["names the owner"], "budget": {"repairs": 1}}, unattended=True,
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert report.result["partial_output"] == "draft two"
    assert report.result["diagnosis"] == [{"criterion": "owner", "reason": "owner missing"}]
    assert "--budget repairs=2" in report.result["next_safe_action"]


async def test_the_same_failure_three_times_ends_repeated_failure_instead_of_spinning(run_script):
    """The recurring class climbs the ladder (rewrite, then re-plan); the third identical failure ends the run."""
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    report = await run_script(
        {"planner": [PLAN_ONE_STEP] * 2, "actor": [step("same")] * 3, "judge": [judge_fail] * 3, "critic": [CRITIC_FAIL] * 3},
        task={"acceptance_criteria": ["names the owner"], "budget": {"repairs": 10}}, unattended=True,
    )
    assert report.status == Terminal.REPEATED_FAILURE
    assert report.values["usage"]["repairs"] == 2
    assert [repair["strategy"] for repair in report.values["quality"]["repairs"]] == ["SECTION_REWRITE", "REPLAN"]


async def test_the_output_schema_is_a_hard_gate_before_the_judge(run_script):
    """A non-conforming answer fails verification without a judge call; the fixed answer commits."""
    schema = {"type": "object", "required": ["owner"], "properties": {"owner": {"type": "string"}}}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step('{"who": "Ana"}'), step('{"owner": "Ana"}')], "judge": [JUDGE_PASS],
         "critic": [step({"scores": {"correctness": 0.2, "completeness": 0.2, "coherence": 0.9, "safety": 1}}), CRITIC_PASS]},
        task={"output_schema": schema, "acceptance_criteria": ["names the owner"]},
    )
    assert report.status == Terminal.SUCCESS
    first_failure = report.values["quality"]["repairs"][0]["problems"][0]
    assert first_failure == "output_schema: at (root): 'owner' is a required property"
    assert report.values["quality"]["repairs"][0]["strategy"] == "FULL_REGENERATION"
    assert report.values["usage"]["calls_by_role"]["judge"] == 1


async def test_an_invalid_plan_is_replanned_then_ends_impossible_when_tools_are_missing(run_script):
    bad = step({"steps": [{"id": "s1", "description": "deploy", "tools": ["k8s__deploy"]}], "blocked": None})
    report = await run_script({"planner": [bad, bad]}, task={"budget": {"replans": 1}}, planning="always")
    assert report.status == Terminal.IMPOSSIBLE
    assert report.values["usage"]["replans"] == 1
    assert "step s1: tool 'k8s__deploy' does not exist" in report.values["ending"]["reason"]


async def test_a_cyclic_plan_is_rejected_with_the_cycle_named(run_script):
    cyclic = step({"steps": [{"id": "a", "description": "x", "depends_on": ["b"], "tools": ["workspace__read_file"]},
                             {"id": "b", "description": "y", "depends_on": ["a"], "tools": ["workspace__read_file"]}]})
    report = await run_script({"planner": [cyclic]}, task={"budget": {"replans": 0}}, planning="always")
    assert report.status == Terminal.VALIDATION_FAIL
    assert "dependency cycle a -> b -> a" in report.values["ending"]["reason"]


async def test_the_planner_can_hand_back_missing_information(run_script):
    blocked = step({"steps": [], "blocked": {"code": "MISSING_INFO", "reason": "which file?"}})
    report = await run_script({"planner": [blocked]}, unattended=True, planning="always")
    assert report.status == Terminal.MISSING_INFO and not report.waiting
    assert report.values["ending"]["reason"] == "planner reports MISSING_INFO: which file?"


async def test_evidence_steps_run_before_acting_and_are_kept_with_their_source(run_script):
    plan = step({"steps": [{"id": "e", "description": "read", "tools": ["workspace__read_file"],
                            "evidence": {"tool": "workspace__read_file", "args": {"path": "notes.md"}}}]})
    report = await run_script({"planner": [plan], "actor": [FINAL], "critic": [CRITIC_PASS]}, planning="always")
    assert report.status == Terminal.SUCCESS
    assert report.values["evidence"] == [{"step_id": "e", "call_id": "r.e", "tool": "workspace__read_file", "ok": True}]
    assert "Ana: publish the notes" in report.values["observations"][0]["excerpt"]


async def test_a_script_that_runs_out_stops_loudly_and_leaves_a_resumable_checkpoint(run_script, runner):
    with pytest.raises(RunStopped) as stopped:
        await run_script({"planner": [PLAN_ONE_STEP], "actor": []})
    assert "actor step 1 requested; script has 0 actor steps" in str(stopped.value)
    report = await runner.report(stopped.value.run_id)
    assert report.values["status"]["phase"] == "validate_plan" and "terminal" not in report.values["status"]


async def test_large_tool_output_is_cut_for_the_model_and_stored_whole(run_script, runner, workspace):
    (workspace / "big.txt").write_text("x" * 10_000)
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[{"name": "workspace__read_file", "args": {"path": "big.txt"}}]), FINAL], "critic": [CRITIC_PASS]},
        max_result_chars=500,
    )
    observation = report.values["observations"][0]
    assert observation["truncated"] and observation["pointer"]
    from boundloop.checkpoints.store import get_payload

    stored = await get_payload(runner.pool, observation["pointer"])
    assert "x" * 10_000 in stored.body
    assert len(_tool_messages(report)[0].content) < 700


async def test_artifact_checks_run_through_tools_before_the_judge_and_drive_repair(run_script, workspace):
    """The check reads summary.md: missing text fails verification without a judge call; the repaired file passes."""
    write = lambda text: {"name": "workspace__write_file", "args": {"path": "summary.md", "content": text}}  # noqa: E731
    check = {"name": "summary names the owner", "tool": "workspace__read_file", "args": {"path": "summary.md"}, "expect_contains": "Ana"}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[write("notes")]), step("written"), step(calls=[write("Ana: notes")]), step("fixed")],
         "judge": [JUDGE_PASS], "critic": [CRITIC_FAIL, CRITIC_PASS]},
        task={"checks": [check], "acceptance_criteria": ["names the owner"]},
    )
    assert report.status == Terminal.SUCCESS
    first = report.values["quality"]["repairs"][0]["problems"][0]
    assert first == "summary names the owner: output of workspace__read_file does not contain 'Ana'"
    assert report.values["usage"]["calls_by_role"]["judge"] == 1
    assert [obs["call_id"] for obs in report.values["observations"] if obs.get("phase") == "verify"] == ["v2.0", "v4.0"]


async def test_a_hung_tool_times_out_and_the_loop_continues(run_script, workspace):
    """The call is cancelled at the timeout, the model reads `timeout`, and the run goes on to commit."""
    import sys
    from pathlib import Path

    probe = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "probe": {"command": sys.executable, "args": [str(probe)], "trusted": True},
    }}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[{"name": "probe__slow", "args": {"seconds": 30}}]), step(calls=[READ_NOTES]), FINAL],
         "critic": [CRITIC_PASS]},
        servers=servers, tool_timeout_s=0.5,
    )
    assert report.status == Terminal.SUCCESS
    ladder = [(obs["status"], obs["stage"]) for obs in report.values["observations"]]
    assert ladder == [("timeout", "attempted"), ("ok", "committed")]
    assert _tool_messages(report)[0].content.startswith("timeout:")


async def test_a_read_repeated_after_a_write_that_succeeded_is_not_a_loop(run_script, workspace):
    """Twice the same read, a write, then the same read again: the write may have changed what the
    read sees, so the third read runs (the breaker counts reads since the last side effect)."""
    write = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "- Ana: publish the notes\n"}}
    report = await run_script({
        "planner": [PLAN_ONE_STEP],
        "actor": [step(calls=[READ_NOTES]), step(calls=[READ_NOTES]), step(calls=[write]), step(calls=[READ_NOTES]), step("Ana publishes the notes.")],
        "judge": [JUDGE_PASS], "critic": [CRITIC_PASS],
    }, task={"targets": ["summary.md"]})
    reads = [obs["status"] for obs in report.values["observations"] if obs.get("tool") == "workspace__read_file"]
    assert reads == ["ok", "ok", "ok"], report.values["observations"]
    assert report.status == Terminal.SUCCESS
