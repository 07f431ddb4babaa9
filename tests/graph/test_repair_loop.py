"""Root-cause repair, convergence control and the goal check end to end: the scripted model, the real
workspace MCP server, real Postgres and the real compiled graph."""

from __future__ import annotations

import json

from boundloop.graph.models.catalog import model_for
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, READ_NOTES, step

FINAL = step("Ana publishes the notes.")
CRITERIA = {"acceptance_criteria": ["names the owner"]}


def judge_fail(reason: str) -> dict:
    return step({"passed": False, "failures": [{"criterion": "owner", "reason": reason}]})


def critic(correctness: float, *defects: dict) -> dict:
    return step({"scores": {"correctness": correctness, "completeness": 1, "coherence": 1, "safety": 1}, "defects": list(defects)})


def feedback(report) -> list[tuple[str, list[dict]]]:
    """Each repair prompt the actor got: its strategy line and its structured diagnosis."""
    prompts = [m.content for m in report.values["messages"] if m.type == "human" and "did not pass review" in m.content]
    return [(text.split("\n", 1)[0], json.loads(text.split("Diagnosis (JSON):\n", 1)[1])) for text in prompts]


async def test_a_retrieval_gap_named_by_the_critic_sends_the_actor_to_gather_evidence(run_script):
    gap = {"problem": "says nothing the notes support", "repair_hint": "read notes.md", "root_cause": "RETRIEVAL_GAP"}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("Someone publishes."), step(calls=[READ_NOTES]), FINAL],
         "critic": [critic(0.3, gap), CRITIC_PASS]}, unattended=True, critique="always",
    )
    assert report.status == Terminal.SUCCESS
    [(line, diagnosis)] = feedback(report)
    assert line.startswith("Your answer did not pass review. Repair strategy RE_RETRIEVE: Gather more evidence first")
    assert diagnosis == [{"cause": "RETRIEVAL_GAP", "problem": "says nothing the notes support", "hint": "read notes.md", "strategy": "RE_RETRIEVE"}]
    checkpointed = report.values["quality"]["repairs"][0]["diagnosis"][0]["cause"]
    assert type(checkpointed) is str, "a class is kept as plain text: an enum in the checkpoint is an unregistered msgpack type"


async def test_a_check_whose_tool_fails_is_a_tool_failure_retried_with_the_tool(run_script, workspace):
    check = {"name": "summary names the owner", "tool": "workspace__read_file", "args": {"path": "summary.md"}, "expect_contains": "Ana"}
    write = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "Ana: publish"}}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("done"), step(calls=[write]), step("written")], "critic": [CRITIC_FAIL, CRITIC_PASS]},
        task={"checks": [check]}, unattended=True,
    )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    [(line, diagnosis)] = feedback(report)
    assert "Repair strategy RETRY_TOOL" in line
    assert (diagnosis[0]["cause"], diagnosis[0]["strategy"]) == ("TOOL_FAILURE", "RETRY_TOOL")
    assert diagnosis[0]["problem"].startswith("summary names the owner: workspace__read_file ended tool_error")
    assert report.values["quality"]["repairs"][0]["diagnosis"][0]["source"] == "check"


async def test_a_recurring_class_escalates_from_rewrite_to_a_replan_that_reaches_the_planner(run_script):
    """The judge's unmet criterion comes back after a rewrite: the second repair re-plans, and the planner reads why."""
    report = await run_script(
        {"planner": [PLAN_ONE_STEP, PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two"), FINAL],
         "judge": [judge_fail("owner missing"), judge_fail("still no owner"), JUDGE_PASS], "critic": [CRITIC_FAIL, CRITIC_FAIL, CRITIC_PASS]},
        task=CRITERIA, unattended=True, critique="always", planning="always",
    )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    assert [repair["strategy"] for repair in report.values["quality"]["repairs"]] == ["SECTION_REWRITE", "REPLAN"]
    assert report.values["usage"]["replans"] == 1 and report.values["usage"]["calls_by_role"]["planner"] == 2
    planner_saw = model_for(report.values["settings"]).last_request("planner")[-1].content
    assert "Re-plan (verification): the output failed review (INCOMPLETENESS): owner: still no owner" in planner_saw


async def test_exhausted_repairs_in_an_attended_run_ask_a_human_who_accepts_the_best_output(run_script, runner):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two")],
         "judge": [judge_fail("owner missing"), judge_fail("owner still missing")], "critic": [critic(0.7), critic(0.2)]},
        task={**CRITERIA, "budget": {"repairs": 1}},
    )
    assert report.status == Terminal.REVIEW_REQUIRED and report.waiting
    [item] = report.interrupts
    request = item["value"]
    assert request["type"] == "review" and request["output"] == "draft one"  # the best-scoring output, not the last
    assert request["reason"].startswith("output still fails after 1 repair(s)")
    assert request["diagnosis"][0]["cause"] == "INCOMPLETENESS"
    done = await runner.resume(report.thread_id, decisions={item["id"]: {"accept": True, "approver": "ana"}})
    assert done.status == Terminal.SUCCESS
    assert done.result["output"] == "draft one"


async def test_a_human_can_grant_more_repairs_and_guide_the_actor(run_script, runner):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two"), step("draft three"), FINAL],
         "judge": [judge_fail("owner missing"), judge_fail("owner still missing"), judge_fail("no owner yet"), JUDGE_PASS],
         "critic": [CRITIC_FAIL, CRITIC_FAIL, CRITIC_FAIL, CRITIC_PASS]},
        task={**CRITERIA, "budget": {"repairs": 1}},
    )
    [item] = report.interrupts
    done = await runner.resume(report.thread_id, decisions={item["id"]: {"grant": {"repairs": 2}, "message": "Ana owns it", "approver": "ana"}})
    assert done.status == Terminal.SUCCESS, done.values["ending"]
    assert any(m.type == "human" and m.content == "A human reviewer says: Ana owns it" for m in done.values["messages"])
    # the ladder started afresh: the recurring class is rewritten again, not re-planned
    assert [repair["strategy"] for repair in done.values["quality"]["repairs"]] == ["SECTION_REWRITE", "SECTION_REWRITE"]


async def test_a_declined_review_of_exhausted_repairs_ends_validation_fail(run_script, runner):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two")],
         "judge": [judge_fail("owner missing"), judge_fail("owner still missing")], "critic": [CRITIC_FAIL, CRITIC_FAIL]},
        task={**CRITERIA, "budget": {"repairs": 1}},
    )
    done = await runner.resume(report.thread_id, decisions={report.interrupts[0]["id"]: {"accept": False, "message": "wrong", "approver": "ana"}})
    assert done.status == Terminal.VALIDATION_FAIL and not done.waiting
    assert done.result["reason"].endswith("; ana declined: wrong")


def _stalling_critics() -> list[dict]:
    """Scores 0.94, then 0.92 twice, each round a different class (so the ladder does not climb)."""
    return [critic(0.7, {"problem": "misses the date", "root_cause": "INCOMPLETENESS"}),
            critic(0.6, {"problem": "contradicts itself", "root_cause": "COHERENCE_FAILURE"}),
            critic(0.6, {"problem": "invents a name", "location": "line 1", "root_cause": "HALLUCINATION"}),
            critic(0.6, {"problem": "wrong owner", "location": "line 1", "root_cause": "FACTUAL_ERROR"})]


async def test_a_stalled_repair_loop_stops_early_keeping_the_best_output(run_script):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step("draft one"), step("draft two"), step("draft three")], "critic": _stalling_critics()[:3]},
        task={"budget": {"repairs": 10, "replans": 0}}, unattended=True, critique="always",
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert report.values["usage"]["repairs"] == 2  # of 10
    assert report.result["reason"] == ("repairs stalled: quality scores 0.94, 0.92, 0.92, no gain in the last 2 iterations; "
                                       "keeping the best output (iteration 0, score 0.94)")
    assert report.result["partial_output"] == "draft one" and report.result["best"] == {"iteration": 0, "score": 0.94}
    assert [entry["score"] for entry in report.values["quality"]["scores"]] == [0.94, 0.92, 0.92]


async def test_a_stall_escalates_to_one_replan_before_giving_up(run_script):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP] * 2, "actor": [step("draft one"), step("draft two"), step("draft three"), step("draft four")],
         "critic": _stalling_critics()},
        task={"budget": {"repairs": 10, "replans": 1}}, unattended=True, critique="always", planning="always",
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert [repair["strategy"] for repair in report.values["quality"]["repairs"]] == ["SECTION_REWRITE", "SECTION_REWRITE", "REPLAN"]
    assert report.values["usage"]["calls_by_role"]["planner"] == 2
    assert report.result["reason"].startswith("repairs stalled: quality scores 0.94, 0.92, 0.92, 0.92")
    assert report.result["partial_output"] == "draft one"
