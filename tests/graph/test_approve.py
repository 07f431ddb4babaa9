"""Gated calls pause the run at one interrupt per call and continue on a human decision."""

from __future__ import annotations

from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, step

DELETE = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}
MOVE = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "old.md"}}


async def test_two_gated_calls_wait_separately_and_each_decision_is_carried_out(run_script, runner, workspace):
    """delete and move both ask (coding_assistant): reject one, approve the other, by interrupt id."""
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE, MOVE]), step("done")], "critic": [CRITIC_PASS]})
    assert waiting.status == Terminal.CONFIRM_REQUIRED
    by_tool = {item["value"]["name"]: item["id"] for item in waiting.interrupts}
    assert set(by_tool) == {"workspace__delete_file", "workspace__move_file"}
    assert {item["value"]["rule"] for item in waiting.interrupts} == {"rule:coding_assistant.delete", "rule:coding_assistant.move"}
    assert {item["value"]["reversibility"] for item in waiting.interrupts} == {"compensable"}

    still_waiting = await runner.resume(waiting.thread_id, decisions={by_tool["workspace__move_file"]: {"decision": "approve", "approver": "ana"}})
    assert [item["value"]["name"] for item in still_waiting.interrupts] == ["workspace__delete_file"]
    assert not (workspace / "old.md").exists()  # approved, but it waits for the decision on the call proposed before it

    done = await runner.resume(waiting.thread_id, decisions={by_tool["workspace__delete_file"]: {"decision": "reject", "message": "keep it"}})
    assert done.status == Terminal.SUCCESS
    assert (workspace / "old.md").exists()
    approvers = {(record["decision"], record["approver"]) for record in done.result["provenance"]["approvers"]}
    assert ("approve", "ana") in approvers and any(decision == "reject" for decision, _ in approvers)
    rejected = [m for m in done.values["messages"] if getattr(m, "tool_call_id", None) == "call_actor_0_0"]
    assert rejected[0].content == "rejected: a human declined workspace__delete_file: keep it"


async def test_an_edit_into_a_denied_call_is_refused(run_script, runner, workspace):
    """The coding profile denies paths under secrets/: an edit cannot move a call there."""
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]})
    [item] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "edit", "args": {"path": "secrets/key.txt"}}})
    assert done.status == Terminal.SUCCESS
    refused = [m for m in done.values["messages"] if getattr(m, "tool_call_id", None) == "call_actor_0_0"][0]
    assert refused.content.startswith("denied: the edited call to workspace__delete_file is not permitted (rule:coding_assistant.secrets")
    assert (workspace / "notes.md").exists()


async def test_unattended_runs_never_wait_every_ask_is_denied(run_script, workspace):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]}, unattended=True)
    assert report.status == Terminal.SUCCESS and not report.interrupts
    assert report.values["observations"][0]["status"] == "denied"
    assert (workspace / "notes.md").exists()


async def test_a_user_policy_rule_applies_with_the_profile_and_is_named_in_the_result(run_script):
    """A deny rule from the user's policy refuses a read the profile would allow."""
    rules = {"rules": [{"id": "no-notes", "action": "deny", "server": "workspace", "tool": "read_file", "arguments": {"path": "notes.md"}}]}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[{"name": "workspace__read_file", "args": {"path": "notes.md"}}]), step("done")],
         "critic": [CRITIC_PASS]},
        task={"goal": "Summarize the meeting notes"}, policy=rules,  # a goal naming notes.md would be refused at intake
    )
    observation = report.values["observations"][0]
    assert (observation["status"], observation["rule"]) == ("denied", "rule:no-notes")
    assert report.values["boundary"]["policy_hash"] != ""


async def test_parallel_approvals_can_be_answered_together(run_script, runner, workspace):
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE, MOVE]), step("done")], "critic": [CRITIC_PASS]})
    decisions = {item["id"]: {"decision": "reject" if item["value"]["name"] == "workspace__delete_file" else "approve"} for item in waiting.interrupts}
    done = await runner.resume(waiting.thread_id, decisions=decisions)
    assert done.status == Terminal.SUCCESS
    assert (workspace / "old.md").exists() and not (workspace / "notes.md").exists()
    assert {obs["call_id"]: obs["status"] for obs in done.values["observations"]} == {"a0.0": "rejected", "a0.1": "ok"}


async def test_writes_run_in_the_proposed_order_whatever_the_mix_of_admitted_and_approved(run_script, runner, workspace):
    """write a (admitted), move a→b (asks), write a (admitted), move a→c (asks): the moves are
    approved last one first, and still every write runs in the order the model proposed it."""
    calls = [
        {"name": "workspace__write_file", "args": {"path": "a.txt", "content": "first"}},
        {"name": "workspace__move_file", "args": {"source": "a.txt", "destination": "b.txt"}},
        {"name": "workspace__write_file", "args": {"path": "a.txt", "content": "second"}},
        {"name": "workspace__move_file", "args": {"source": "a.txt", "destination": "c.txt"}},
    ]
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=calls), step("done")], "critic": [CRITIC_PASS]},
                               task={"budget": {"side_effects": 4}})
    by_call = {item["value"]["call_id"]: item["id"] for item in waiting.interrupts}
    assert sorted(by_call) == ["a0.1", "a0.3"] and not (workspace / "a.txt").exists()  # nothing ran before the approvals
    later = await runner.resume(waiting.thread_id, decisions={by_call["a0.3"]: {"decision": "approve"}})
    assert [item["value"]["call_id"] for item in later.interrupts] == ["a0.1"] and not (workspace / "a.txt").exists()
    done = await runner.resume(waiting.thread_id, decisions={by_call["a0.1"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS
    assert (workspace / "b.txt").read_text() == "first" and (workspace / "c.txt").read_text() == "second"
    assert not (workspace / "a.txt").exists()
    assert [obs["status"] for obs in done.values["observations"]] == ["ok"] * 4


async def test_a_rejected_call_leaves_its_place_and_the_rest_run_in_order(run_script, runner, workspace):
    calls = [
        {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "gone.md"}},
        {"name": "workspace__write_file", "args": {"path": "notes.md", "content": "kept"}},
        {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "kept.md"}},
    ]
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=calls), step("done")], "critic": [CRITIC_PASS]},
                               task={"budget": {"side_effects": 3}})
    decisions = {item["id"]: {"decision": "reject" if item["value"]["call_id"] == "a0.0" else "edit",
                              "args": {"source": "notes.md", "destination": "edited.md"}} for item in waiting.interrupts}
    decisions = {key: value if value["decision"] == "edit" else {"decision": "reject"} for key, value in decisions.items()}
    done = await runner.resume(waiting.thread_id, decisions=decisions)
    assert done.status == Terminal.SUCCESS
    assert (workspace / "edited.md").read_text() == "kept" and not (workspace / "gone.md").exists()
    assert {obs["call_id"]: obs["status"] for obs in done.values["observations"]} == {"a0.0": "rejected", "a0.1": "ok", "a0.2": "ok"}


PLAN_WRITE = {"content": {"steps": [{"id": "s1", "description": "write summary.md", "tools": ["workspace__write_file"], "args": {"path": "summary.md"}}],
                          "blocked": None}}
WRITE = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "- Ana: publish the notes\n"}}
WRITE_AGAIN = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "Action items:\n- Ana: publish the notes\n"}}
ASK_WRITES = {"rules": [{"id": "review-writes", "action": "ask", "tool": "write_file"}]}


async def test_a_required_step_a_human_rejected_ends_permission_denied_once_the_actor_answers_without_it(run_script, runner, workspace):
    """The actor reads the rejection and gives its answer anyway: the run ends PERMISSION_DENIED at
    that answer, naming the rejection — not a repair loop ending REPEATED_FAILURE."""
    waiting = await run_script({"planner": [PLAN_WRITE], "actor": [step(calls=[WRITE]), step("summary.md is written.")]}, policy=ASK_WRITES,
                               planning="always")
    [item] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "reject", "message": "not this file"}})
    assert done.status == Terminal.PERMISSION_DENIED
    assert done.values["ending"]["reason"] == ("step s1 (write summary.md) needs only refused actions: workspace__write_file: "
                                               "rejected: a human declined workspace__write_file: not this file")
    assert done.values["ending"]["next_safe_action"].startswith("Change the task or its plan, or run again and approve the call")
    assert done.values["usage"]["repairs"] == 0 and done.values["usage"]["calls_by_role"]["actor"] == 2
    assert not (workspace / "summary.md").exists()


async def test_after_a_rejection_the_actor_may_revise_and_an_approved_call_completes_the_step(run_script, runner, workspace):
    """A rejection is an observation, not the end: the actor proposes another write, a human approves it."""
    waiting = await run_script({"planner": [PLAN_WRITE], "actor": [step(calls=[WRITE]), step(calls=[WRITE_AGAIN]), step("summary.md is written.")],
                                "judge": [], "critic": [CRITIC_PASS]}, policy=ASK_WRITES)
    [first] = waiting.interrupts
    again = await runner.resume(waiting.thread_id, decisions={first["id"]: {"decision": "reject", "message": "add a heading"}})
    assert again.status == Terminal.CONFIRM_REQUIRED
    [second] = again.interrupts
    done = await runner.resume(waiting.thread_id, decisions={second["id"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS
    assert (workspace / "summary.md").read_text() == WRITE_AGAIN["args"]["content"]


async def test_a_human_respond_is_observed_never_verified_and_does_not_complete_the_step(run_script, runner, workspace):
    """The human answers for the tool instead of running it: the model gets the answer, but the
    move never happened, so the call stays `observed`, the plan step stays undone, and the run
    cannot end SUCCESS on it."""
    plan = {"content": {"steps": [{"id": "s1", "description": "move notes.md to archive.md", "tools": ["workspace__move_file"]}], "blocked": None}}
    move = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "archive.md"}}
    waiting = await run_script({"planner": [plan] * 4, "actor": [step(calls=[move])] + [step("notes.md is now archive.md.")] * 8,
                                "judge": [JUDGE_PASS] * 4, "critic": [CRITIC_PASS] * 4},
                               policy={"rules": [{"id": "ask-moves", "action": "ask", "tool": "move_file"}]}, planning="always")
    [item] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "respond", "result": "moved", "approver": "ana"}})
    (answered,) = [obs for obs in done.values["observations"] if obs.get("tool") == "workspace__move_file"]
    assert (answered["status"], answered["stage"], answered["answered_by"]) == ("ok", "observed", "ana")
    assert answered["postcondition"].startswith("answered by a human")
    assert done.values["plan"]["steps"][0]["status"] != "done"
    assert done.status != Terminal.SUCCESS, done.values.get("ending")
    assert (workspace / "notes.md").exists() and not (workspace / "archive.md").exists()
