"""Stops a human can resolve pause the run with one typed interrupt, then continue or end."""

from __future__ import annotations

import asyncio

from boundloop.checkpoints import approvals
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, READ_NOTES, step

FINAL = step("Ana publishes the notes.")
WAIT_S = 3.0
"""How long a human takes to answer, in the tests of expiry and charged waits."""
LIST = {"name": "workspace__list_files", "args": {}}


async def test_a_tripped_budget_asks_for_an_extension_and_continues_where_it_stopped(run_script, runner):
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST]), step(calls=[LIST]), FINAL], "critic": [CRITIC_PASS]},
        task={"budget": {"tool_calls": 1}},
    )
    assert waiting.status == Terminal.BUDGET_EXHAUSTED and waiting.waiting
    [item] = waiting.interrupts
    assert {key: item["value"][key] for key in ("type", "dimension", "limit", "used")} == {
        "type": "budget_extension", "dimension": "tool_calls", "limit": 1, "used": 1}
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"grant": {"tool_calls": 3}, "approver": "ana"}})
    assert done.status == Terminal.SUCCESS
    assert done.values["budget"]["tool_calls"] == 3 and done.values["usage"]["tool_calls"] == 2


async def test_a_declined_extension_ends_the_run_with_the_budget_status(run_script, runner):
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST])]}, task={"budget": {"tool_calls": 1}})
    done = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"message": "enough"}})
    assert done.status == Terminal.BUDGET_EXHAUSTED and not done.waiting
    assert done.result["reason"] == "budget.tool_calls exhausted: 1 of 1 used."


async def test_missing_information_is_asked_and_the_answer_reaches_the_planner(run_script, runner):
    blocked = step({"steps": [], "blocked": {"code": "MISSING_INFO", "reason": "which file should I summarize?"}})
    waiting = await run_script({"planner": [blocked, PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), FINAL]}, planning="always")
    assert waiting.status == Terminal.MISSING_INFO and waiting.waiting
    [item] = waiting.interrupts
    assert item["value"]["question"] == "planner reports MISSING_INFO: which file should I summarize?"
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"answer": "notes.md"}})
    assert done.status == Terminal.SUCCESS
    assert done.values["clarifications"] == ["planner reports MISSING_INFO: which file should I summarize? → notes.md"]
    assert done.values["usage"]["calls_by_role"]["planner"] == 2


async def test_a_result_in_the_review_band_waits_for_review_and_a_rejection_rolls_back(run_script, runner, workspace):
    middling = step({"scores": {"correctness": 0.8, "completeness": 0.7, "coherence": 0.75, "safety": 0.95}})
    write = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "draft"}}
    waiting = await run_script({"actor": [step(calls=[write]), FINAL], "critic": [middling]}, critique="always")
    assert waiting.status == Terminal.REVIEW_REQUIRED and waiting.waiting
    [item] = waiting.interrupts
    assert item["value"]["type"] == "review" and item["value"]["output"] == "Ana publishes the notes."
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"accept": False, "message": "too vague", "approver": "ana"}})
    assert done.status == Terminal.VALIDATION_FAIL
    assert done.result["reason"] == "rejected by ana: too vague"
    assert not (workspace / "summary.md").exists()
    assert [entry["status"] for entry in done.result["compensations"]] == ["ok"]


async def test_an_accepted_review_commits(run_script, runner):
    middling = step({"scores": {"correctness": 0.8, "completeness": 0.7, "coherence": 0.75, "safety": 0.95}})
    waiting = await run_script({"actor": [FINAL], "critic": [middling]}, critique="always")
    done = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"accept": True, "approver": "ana"}})
    assert done.status == Terminal.SUCCESS
    assert waiting.values["ending"]["reason"] == "confidence 0.876, but a human must see it: safety score 0.95 is below 0.98"
    assert done.values["ending"]["reason"] == "accepted by ana at confidence 0.876"  # (0.35 × critic 0.7875 + 0.25 × verified 1) / 0.6


async def test_a_plan_can_require_approval_and_a_rejected_plan_is_made_again(run_script, runner):
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP, PLAN_ONE_STEP], "actor": [FINAL], "critic": [CRITIC_PASS]}, task={"require_plan_approval": True}
    )
    assert waiting.status == Terminal.CONFIRM_REQUIRED and waiting.interrupts[0]["value"]["type"] == "plan_approval"
    again = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"accept": False, "message": "read first"}})
    assert again.interrupts[0]["value"]["type"] == "plan_approval"
    assert again.values["usage"]["calls_by_role"]["planner"] == 2
    done = await runner.resume(waiting.thread_id, decisions={again.interrupts[0]["id"]: {"accept": True}})
    assert done.status == Terminal.SUCCESS and done.values["plan"]["approved"]


async def test_unattended_runs_never_wait_for_an_extension(run_script):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST])]},
                              task={"budget": {"tool_calls": 1}}, unattended=True)
    assert report.status == Terminal.BUDGET_EXHAUSTED and not report.waiting


async def test_when_the_critic_and_the_verifier_disagree_a_human_decides(run_script, runner):
    """The judge fails the answer, the critic passes it: ask; an accepted output commits, named as such."""
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [FINAL], "judge": [judge_fail], "critic": [CRITIC_PASS]},
                               task={"acceptance_criteria": ["names the owner"]})
    assert waiting.status == Terminal.REVIEW_REQUIRED
    [item] = waiting.interrupts
    assert item["value"]["reason"] == "the verifier and the critic disagree: verifier failed: owner: owner missing; critic passed"
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"accept": True, "approver": "ana"}})
    assert done.status == Terminal.SUCCESS
    # (0.35 × critic 1.0 + 0.25 × verification failed 0) / 0.6: the human's acceptance, not the score, commits it
    assert done.values["ending"]["reason"] == "committed at confidence 0.5833, accepted by ana when the verifier and the critic disagreed"


async def test_a_rejected_disagreement_goes_to_repair_with_the_reviewers_reason(run_script, runner):
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [FINAL, step("Ana (owner) publishes the notes.")], "judge": [judge_fail, JUDGE_PASS],
         "critic": [CRITIC_PASS, CRITIC_PASS]},
        task={"acceptance_criteria": ["names the owner"]},
    )
    done = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"accept": False, "message": "say who owns it"}})
    assert done.status == Terminal.SUCCESS
    assert "human review: say who owns it" in done.values["quality"]["repairs"][0]["problems"]


async def test_an_extension_granted_after_its_expiry_is_declined_and_the_wait_is_charged(run_script, runner):
    """Escalations follow the tool approvals' rules: past `approval_timeout_s` a grant counts as a
    decline (recorded so), and with `count_wait_time` the wait is charged to the wall clock."""
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST]), step(calls=[LIST]), FINAL],
                                "critic": [CRITIC_PASS]},
                               task={"budget": {"tool_calls": 1}}, approval_timeout_s=0.5, count_wait_time=True)
    [item] = waiting.interrupts
    await asyncio.sleep(WAIT_S)
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"grant": {"tool_calls": 3}, "approver": "ana"}})
    assert done.status == Terminal.BUDGET_EXHAUSTED and not done.waiting
    assert done.values["budget"]["tool_calls"] == 1
    [record] = await approvals.history(runner.pool, waiting.thread_id)
    assert record.approver.startswith("boundloop:expiry") and record.decision == "reject"
    assert done.values["usage"]["wall_clock_s"] >= WAIT_S


async def test_an_extension_granted_in_time_is_applied_and_its_wait_charged_only_when_asked(run_script, runner):
    walls = {}
    for counted in (True, False):  # the cold start (servers, pools) on the counted run, not on the one that must stay under the wait
        waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST]), FINAL],
                                    "critic": [CRITIC_PASS]},
                                   task={"budget": {"tool_calls": 1}}, approval_timeout_s=600, count_wait_time=counted)
        await asyncio.sleep(WAIT_S)
        done = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"grant": {"tool_calls": 3}}})
        assert done.status == Terminal.SUCCESS
        walls[counted] = done.values["usage"]["wall_clock_s"]
    assert walls[True] >= WAIT_S > walls[False], walls
