"""A run that fails on quality after side effects undoes them, last first; budget stops keep them."""

from __future__ import annotations

from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_FAIL, PLAN_ONE_STEP, step

JUDGE_FAIL = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
WRITE_NEW = {"name": "workspace__write_file", "args": {"path": "new.md", "content": "draft"}}
OVERWRITE = {"name": "workspace__write_file", "args": {"path": "notes.md", "content": "replaced"}}


async def test_a_validation_failure_after_two_writes_compensates_both_in_reverse_order(run_script, runner, workspace):
    original = (workspace / "notes.md").read_text()
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[WRITE_NEW]), step(calls=[OVERWRITE]), step("draft")],
         "judge": [JUDGE_FAIL], "critic": [CRITIC_FAIL]},
        task={"acceptance_criteria": ["names the owner"], "budget": {"repairs": 0}}, unattended=True,
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert [(item["call_id"], item["status"]) for item in report.result["compensations"]] == [("a1.0", "ok"), ("a0.0", "ok")]
    assert report.result["manual_action_required"] == []
    assert (workspace / "notes.md").read_text() == original
    assert not (workspace / "new.md").exists()
    events = [event for event in await runner.trace(report.thread_id) if event["kind"] == "compensation"]
    assert len(events) == 1


async def test_a_budget_stop_keeps_the_partial_work(run_script, workspace):
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[WRITE_NEW]), step(calls=[OVERWRITE])]},
        task={"budget": {"model_turns": 2}}, unattended=True,
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert "compensations" not in report.result
    assert (workspace / "new.md").read_text() == "draft"
