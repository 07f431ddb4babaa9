"""Proportionate control: a simple task pays for no planner, judge or critic call; a complex one, a
criterion no check covers and every critic trigger still get theirs, decided at intake and verify and
recorded with the reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from boundloop.graph.cli.progress import render_report
from boundloop.graph.console import timeline
from boundloop.graph.core.status import Terminal
from boundloop.graph.models.catalog import model_for
from boundloop.graph.models.prompts import task_brief
from boundloop.tools import kept_listing
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import boundloop

WRITE_SUMMARY = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "- Ana: publish the notes\n"}}
NAMES_ANA = "summary.md names Ana"
CHECK_SUMMARY = {"name": NAMES_ANA, "tool": "workspace__read_file", "args": {"path": "summary.md"}, "expect_contains": "Ana"}
SIMPLE = {"goal": "Write the action items of notes.md to summary.md", "acceptance_criteria": [NAMES_ANA], "checks": [CHECK_SUMMARY]}
"""Read one file, write one file with a deterministic check named after the criterion, answer."""
SIMPLE_ACTOR = [step(calls=[READ_NOTES]), step(calls=[WRITE_SUMMARY]), step("summary.md lists the action items")]
SHORT_WRITE = Path(__file__).parents[1] / "faults" / "servers" / "short_write.py"
DELETE_NOTES = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}


@pytest.fixture
def run_script(run_script):
    """Runs as a user's run would: the run decides its phases, whatever the script has for them."""

    async def run(roles, **kwargs):
        return await run_script(roles, **{"planning": None, "critique": None, **kwargs})

    return run


def calls(report) -> dict[str, int]:
    return dict(report.values["usage"]["calls_by_role"])


async def test_a_simple_task_with_a_deterministic_check_calls_no_planner_judge_or_critic(run_script, workspace):
    report = await run_script({"actor": SIMPLE_ACTOR}, task=SIMPLE)
    assert report.status == Terminal.SUCCESS
    assert calls(report) == {"actor": 3}
    assert (workspace / "summary.md").read_text() == "- Ana: publish the notes\n"
    control = report.values["control"]
    assert (control["planning"]["plan"], control["judge"]["run"], control["critique"]["run"]) == (False, False, False)
    assert control["judge"]["reason"] == "every acceptance criterion has a deterministic check"
    assert control["critique"]["triggers"] == []
    [implicit] = report.values["plan"]["steps"]
    assert (implicit["description"], implicit["done_when"]) == (SIMPLE["goal"], NAMES_ANA)
    assert report.values["plan"]["valid"] and report.values["plan"]["hash"]  # validated like any plan
    assert report.result["provenance"]["verification"]["passed"] is True
    assert [obs["stage"] for obs in report.values["observations"] if obs.get("phase") != "verify"] == ["committed", "committed"]
    brief = model_for(report.values["settings"]).last_request("actor")[1].content
    assert brief == task_brief(SIMPLE), "the implicit plan restates the goal and there is no evidence: neither is sent"


async def test_a_re_planned_implicit_plan_is_shown_to_the_actor(run_script, workspace):
    """The check fails twice, so the second repair re-plans the implicit step: from then on the plan is
    the planner's, and the actor is told it and what the re-plan replaced."""
    wrong = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "- someone: publish\n"}}
    replanned = [{"id": "s1b", "description": "write summary.md with Ana's item", "tools": ["workspace__write_file"], "args": {"path": "summary.md"}}]
    report = await run_script(
        {"actor": [step(calls=[wrong]), step("written"), step("written, again"), step(calls=[WRITE_SUMMARY]), step("rewritten")],
         "planner": [step({"steps": replanned})], "critic": [CRITIC_FAIL, CRITIC_FAIL, CRITIC_PASS]},
        task={**SIMPLE, "budget": {"side_effects": 10}}, unattended=True,
        policy={"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]},
    )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    assert [repair["strategy"] for repair in report.values["quality"]["repairs"]] == ["SECTION_REWRITE", "REPLAN"]
    brief = model_for(report.values["settings"]).last_request("actor")[1].content
    assert "Plan:\n- [done] s1b: write summary.md with Ana's item\nReady now: none\nRe-planned after verification" in brief


async def test_the_same_task_asked_for_every_phase_pays_a_planner_a_judge_and_a_critic(run_script):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": SIMPLE_ACTOR, "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]},
                              task=SIMPLE, planning="always", judge="always", critique="always")
    assert report.status == Terminal.SUCCESS
    assert calls(report) == {"planner": 1, "actor": 3, "judge": 1, "critic": 1}
    assert report.values["control"]["planning"]["reason"] == "the run's settings ask for planning: always"


async def test_a_task_with_several_criteria_is_planned_unless_planning_is_never(run_script):
    task = {"acceptance_criteria": ["names Ana", "is short"]}
    planned = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step("Ana publishes the notes")], "judge": [JUDGE_PASS]}, task=task)
    assert planned.status == Terminal.SUCCESS
    assert calls(planned) == {"planner": 1, "actor": 1, "judge": 1}
    assert planned.values["control"]["planning"]["reason"] == "the task is complex: 2 acceptance criteria"

    unplanned = await run_script({"actor": [step("Ana publishes the notes")], "judge": [JUDGE_PASS]}, task=task, planning="never")
    assert unplanned.status == Terminal.SUCCESS
    assert calls(unplanned) == {"actor": 1, "judge": 1}


async def test_numbered_steps_in_the_goal_make_a_task_complex(run_script):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step("done")]},
                              task={"goal": "1. read notes.md\n2. write summary.md"})
    assert calls(report) == {"planner": 1, "actor": 1}
    assert report.values["control"]["planning"]["reason"] == "the task is complex: 2 steps declared in the goal"


async def test_a_profile_that_asks_plans_and_critiques_a_simple_task(run_script):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step("nothing to do")], "critic": [CRITIC_PASS]},
                              task={"profile": "sre_agent"})
    assert calls(report) == {"planner": 1, "actor": 1, "critic": 1}
    assert report.values["control"]["critique"]["reason"] == "the profile asks for critique: always"


async def test_a_criterion_the_output_misses_is_judged_critiqued_and_repaired(run_script, runner):
    """No check covers the criterion, so the judge reads it; its failure triggers the critic and a repair,
    and the repaired output is critiqued again before it commits."""
    judge_fail = step({"passed": False, "failures": [{"criterion": "names Ana", "reason": "Ana is missing"}]})
    report = await run_script(
        {"actor": [step("the notes have action items"), step("Ana publishes the notes")], "judge": [judge_fail, JUDGE_PASS],
         "critic": [CRITIC_FAIL, CRITIC_PASS]},
        task={"acceptance_criteria": ["names Ana"]},
    )
    assert report.status == Terminal.SUCCESS
    assert report.result["output"] == "Ana publishes the notes"
    assert calls(report) == {"actor": 2, "judge": 2, "critic": 2}
    critiques = [event["data"]["control"]["critique"] for event in await runner.trace(report.thread_id) if event.get("node") == "verify"]
    assert [decision["triggers"] for decision in critiques] == [["verification failed: names Ana"], ["the output was repaired 1 time(s)"]]


async def test_a_failed_check_triggers_the_critic_and_the_repaired_output_is_critiqued_again(run_script, runner, workspace):
    wrong = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "- someone: publish\n"}}
    report = await run_script(
        {"actor": [step(calls=[wrong]), step("written"), step(calls=[WRITE_SUMMARY]), step("rewritten")],
         "critic": [CRITIC_FAIL, CRITIC_PASS]},
        task=SIMPLE,
    )
    assert report.status == Terminal.SUCCESS
    assert calls(report) == {"actor": 4, "critic": 2}
    assert "Ana" in (workspace / "summary.md").read_text()
    critiques = [event["data"]["control"]["critique"] for event in await runner.trace(report.thread_id) if event.get("node") == "verify"]
    assert [decision["triggers"] for decision in critiques] == [[f"verification failed: {NAMES_ANA}"], ["the output was repaired 1 time(s)"]]


async def test_a_write_whose_post_condition_fails_triggers_the_critic(run_script, workspace):
    """The store keeps half the content and answers ok. Nothing else finds it: no criterion, no check, the
    implicit step promises no call. The failed post-condition alone sends the output to the critic."""
    servers = {"mcpServers": {"store": {"command": sys.executable, "args": [str(SHORT_WRITE), "--root", str(workspace), "--keyed"],
                                        "trusted": True, "root": str(workspace)}}}
    write = {"name": "store__write_file", "args": {"path": "report.md", "content": "all four quarters\n"}}
    report = await run_script({"actor": [step(calls=[write]), step("stored")], "critic": [CRITIC_FAIL]},
                              task={"goal": "Store the report", "budget": {"repairs": 0}},
                              servers=servers, policy={"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]}, unattended=True)
    assert calls(report) == {"actor": 2, "critic": 1}
    assert report.values["control"]["critique"]["triggers"] == ["side effects not verified (a failed post-condition, or a human's answer in place of the call): store__write_file"]
    assert report.status != Terminal.SUCCESS


async def test_a_high_risk_write_a_human_approved_triggers_the_critic(run_script, runner, workspace):
    """Deleting a file asks a human (coding_assistant); once approved and run, the result is critiqued."""
    waiting = await run_script({"actor": [step(calls=[DELETE_NOTES]), step("deleted notes.md")], "critic": [CRITIC_PASS]},
                               task={"goal": "Delete notes.md"})
    [item] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "approve", "approver": "ana"}})
    assert done.status == Terminal.SUCCESS
    assert not (workspace / "notes.md").exists()
    assert calls(done) == {"actor": 2, "critic": 1}
    assert done.values["control"]["critique"]["triggers"] == ["risky side effects: workspace__delete_file (approved by a human)"]


async def test_a_failed_tool_call_triggers_the_critic(run_script):
    missing = {"name": "workspace__read_file", "args": {"path": "missing.md"}}
    report = await run_script({"actor": [step(calls=[missing]), step("no such file")], "critic": [CRITIC_PASS]})
    assert calls(report) == {"actor": 2, "critic": 1}
    assert report.values["control"]["critique"]["triggers"] == ["tool calls failed: workspace__read_file"]



async def test_show_and_the_console_say_why_each_phase_ran_or_was_skipped(run_script, runner):
    report = await run_script({"actor": SIMPLE_ACTOR}, task=SIMPLE)
    out = Console(record=True, width=300)
    render_report(out, report)
    shown = out.export_text()
    assert "plan: skipped — a simple task: one implicit step (the goal, its criteria as done_when), no planner call" in shown
    assert "judge: skipped — every acceptance criterion has a deterministic check" in shown
    assert "critique: skipped — no trigger: verification passed on its own" in shown
    assert f"tool listing: ran — {kept_listing.LISTED_NONE_KEPT}" in shown  # the first run on this workspace's servers
    drawn = timeline.build(await runner.trace(report.thread_id), report.values, approvals=[])
    assert [(row["phase"], row["ran"]) for row in drawn.reasons] == [("tool listing", True), ("plan", False), ("judge", False), ("critique", False)]


async def test_show_says_the_judge_ran_for_a_criterion_no_check_covers(run_script):
    judged = await run_script({"actor": [step("Ana publishes the notes")], "judge": [JUDGE_PASS]}, task={"acceptance_criteria": ["names Ana"]})
    out = Console(record=True, width=300)
    render_report(out, judged)
    assert "judge: ran — 1 of 1 criteria have no deterministic check" in out.export_text()


def test_the_command_line_sets_planning_and_show_says_why(db_url, tmp_path, workspace):
    script = tmp_path / "never.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {"actor": [step("Ana publishes the notes")], "judge": [JUDGE_PASS]}}))
    common = ["--database-url", db_url]
    ran = boundloop("run", "Summarize notes.md", "-c", "names Ana", "-c", "is one line", "--planning", "never", "--script", str(script),
                    "--workspace", str(workspace), "--json", *common)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["usage"]["calls_by_role"] == {"actor": 1, "judge": 1}
    shown = boundloop("show", report["run_id"], *common)
    assert "plan: skipped — the run's settings ask for planning: never" in shown.stdout
    assert "judge: ran — 2 of 2 criteria have no deterministic check" in shown.stdout
    assert "tool listing: ran — listed by the servers at intake" in " ".join(shown.stdout.split())
