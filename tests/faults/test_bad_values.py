"""Bad values are refused at the door with one clear line, the right exit code, and records that
match what happened: NaN and negative limits, a negative approval timeout, malformed --edit JSON,
a NUL in a tool name, a refused decision, and a decision that arrives after its request expired."""

from __future__ import annotations

import asyncio
import json

import pytest

from boundloop.checkpoints import approvals, store
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step
from tests.graph.test_cli import boundloop

DELETE = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x", "--budget", "wall_clock_s=NaN"], "--budget 'wall_clock_s=NaN': wall_clock_s=nan is not a limit"),
        (["run", "x", "--budget", "tool_calls=-5"], "--budget 'tool_calls=-5': tool_calls=-5 is not a limit"),
        (["run", "x", "--budget", "cost_usd=Infinity"], "cost_usd=inf is not a limit"),
        (["run", "x", "--approval-timeout", "-3"], "--approval-timeout -3 is not a number of seconds, 0 or more"),
        (["approve", "run-x", "a0.0", "--edit", "{bad"], "--edit is not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
        (["approve", "run-x", "a0.0", "--edit", "[1, 2]"], "--edit must be a JSON object of arguments (got list)"),
    ],
)
def test_a_bad_value_gets_one_line_and_exit_2(db_url, tmp_path, args, message):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"roles": {}}))
    extra = ["--model", "scripted", "--script", str(script)] if args[0] == "run" else []
    result = boundloop(*args, *extra, "--database-url", db_url)
    assert result.returncode == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr


async def test_a_nul_in_a_tool_name_is_refused_as_unknown_and_the_run_goes_on(run_script, runner):
    bad = {"name": "workspace\x00__read_file", "args": {"path": "notes.md"}}
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[bad]), step("nothing to read")], "critic": [CRITIC_PASS]})
    assert report.status == Terminal.SUCCESS
    call = next(obs for obs in report.values["observations"] if obs["call_id"] == "a0.0")
    assert call["status"] == "unknown_tool"
    assert (await store.get_run(runner.pool, report.thread_id)).status == Terminal.SUCCESS
    acts = [event for event in await runner.trace(report.thread_id) if event["node"] == "act"]
    assert acts[0]["data"]["decisions"][0]["tool"] == "workspace\ufffd__read_file"  # the gate decides in act's step


async def test_a_refused_decision_exits_2_with_the_reason_and_the_recorded_one_can_still_be_applied(run_script, runner, db_url, workspace):
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]})
    call = waiting.interrupts[0]["value"]
    # Another approver's decision was recorded, and its process died before continuing the run.
    await approvals.decide(runner.pool, thread_id=waiting.thread_id, call_id="a0.0", args_hash=call["args_hash"], decision="approve",
                           approver="alice", interrupt_id=None)
    refused = await asyncio.to_thread(boundloop, "reject", waiting.thread_id, "a0.0", "--database-url", db_url)
    assert refused.returncode == 2, refused.stdout
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "already decided (approve by alice)" in lines[0], refused.stderr
    assert (workspace / "notes.md").exists()

    done = await runner.decide(waiting.thread_id, "a0.0", {"decision": "approve", "approver": "alice"})
    assert done.status == Terminal.SUCCESS and not (workspace / "notes.md").exists()
    recorded = await approvals.get_approval(runner.pool, waiting.thread_id, "a0.0")
    assert (recorded.decision, recorded.approver) == ("approve", "alice")


async def test_a_decision_after_expiry_is_refused_and_recorded_as_the_rejection_it_counts_as(run_script, runner, workspace):
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]},
                               approval_timeout_s=1)
    await asyncio.sleep(1.5)
    with pytest.raises(ApprovalRefused, match="expired at .* and counts as a rejection"):
        await runner.decide(waiting.thread_id, "a0.0", {"decision": "approve", "approver": "bob"})
    assert (await approvals.get_approval(runner.pool, waiting.thread_id, "a0.0")).decision is None

    # The same late approval sent straight to the graph (as a server client would) is used as a rejection.
    done = await runner.resume(waiting.thread_id, decisions={waiting.interrupts[0]["id"]: {"decision": "approve", "approver": "bob"}})
    assert done.status == Terminal.SUCCESS and (workspace / "notes.md").exists()
    recorded = await approvals.get_approval(runner.pool, waiting.thread_id, "a0.0")
    assert (recorded.decision, recorded.approver) == ("reject", "boundloop:expiry (late approve by bob)")
