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


async def test_an_unsafe_ending_removes_the_directories_its_writes_made_and_keeps_the_ones_that_were_there(run_script, workspace):
    """Three denied calls end the run UNSAFE_DETECTION; its rollback deletes the files it wrote and
    the directories made for them, and leaves a directory that existed before (and its file)."""
    (workspace / "kept").mkdir()
    (workspace / "kept" / "old.md").write_text("old\n")
    writes = [{"name": "workspace__write_file", "args": {"path": "new/deep/file.md", "content": "x"}},
              {"name": "workspace__write_file", "args": {"path": "kept/sub/file.md", "content": "y"}},
              {"name": "workspace__write_file", "args": {"path": "kept/file.md", "content": "z"}}]
    deletes = [{"name": "workspace__delete_file", "args": {"path": name}} for name in ("notes.md", "a.md", "b.md")]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=writes), *(step(calls=[delete]) for delete in deletes), step("done")]},
        task={"profile": "coding_assistant", "budget": {"side_effects": 5}}, unattended=True,
    )
    assert report.status == Terminal.UNSAFE_DETECTION
    assert [line["status"] for line in report.result["compensations"]] == ["ok", "ok", "ok"]
    left = sorted(path.relative_to(workspace).as_posix() for path in workspace.rglob("*") if ".boundloop" not in path.parts)
    assert left == ["kept", "kept/old.md", "notes.md"]
