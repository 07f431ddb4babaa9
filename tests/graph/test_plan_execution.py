"""The plan drives execution, end to end on real Postgres, the real workspace MCP server and the
real graph: dependencies hold calls back, independent reads run in one wave, and a step that keeps
failing is re-planned — only it and its dependents, the done steps never run again."""

from __future__ import annotations

from langchain_core.messages import ToolMessage

from boundloop.checkpoints import store
from boundloop.graph.models.catalog import model_for
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, step

ALLOW_WRITES = {"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]}
WRITE_THEN_READ = [
    {"id": "s1", "description": "write a.md", "tools": ["workspace__write_file"], "args": {"path": "a.md"}},
    {"id": "s2", "description": "read a.md back", "tools": ["workspace__read_file"], "args": {"path": "a.md"}, "depends_on": ["s1"]},
]


def write(path: str, content: str) -> dict:
    return {"name": "workspace__write_file", "args": {"path": path, "content": content}}


def read(path: str) -> dict:
    return {"name": "workspace__read_file", "args": {"path": path}}


def _results(report) -> dict[str, ToolMessage]:
    return {message.tool_call_id: message for message in report.values["messages"] if isinstance(message, ToolMessage)}


async def _ledger_tools(runner, report) -> list[tuple[str, str]]:
    return [(entry.call_id, entry.tool) for entry in await store.run_ledger(runner.pool, report.thread_id)]


async def test_a_call_for_a_step_whose_dependency_is_not_done_is_refused_then_done_in_order(run_script, runner, workspace):
    """The actor reads a.md before writing it: the read serves s2, which waits for s1, so it is
    refused unsent — no budget, no observation beyond `intended`. Then write, read: SUCCESS."""
    report = await run_script(
        {"planner": [step({"steps": WRITE_THEN_READ})],
         "actor": [step(calls=[read("a.md")]), step(calls=[write("a.md", "A\\n")]), step(calls=[read("a.md")]), step("a.md says A")],
         "critic": [CRITIC_PASS]},
        policy=ALLOW_WRITES, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    refused = _results(report)["call_actor_0_0"]
    assert refused.content == ("dependency_unmet: workspace__read_file serves plan step s2, which waits for s1 (not done). "
                               "The call was not made. Ready steps now: s1.")
    observations = {obs["call_id"]: obs for obs in report.values["observations"]}
    assert (observations["a0.0"]["stage"], observations["a0.0"]["status"]) == ("intended", "dependency_unmet")
    assert [observations[cid]["step_id"] for cid in ("a1.0", "a2.0")] == ["s1", "s2"]
    assert report.values["usage"]["tool_calls"] == 2
    assert [s["status"] for s in report.values["plan"]["steps"]] == ["done", "done"]
    assert await _ledger_tools(runner, report) == [("a1.0", "write_file")]


async def test_the_actor_brief_shows_the_ready_set_and_what_each_step_waits_for(run_script):
    report = await run_script(
        {"planner": [step({"steps": WRITE_THEN_READ})], "actor": [step("nothing to do")]},
        policy=ALLOW_WRITES, task={"budget": {"repairs": 0}}, unattended=True, planning="always",
    )
    brief = str(model_for(report.values["settings"]).last_request("actor")[1].content)
    assert "- [pending] s1: write a.md\n- [pending] s2: read a.md back (waits for s1)\nReady now: s1" in brief


async def test_calls_sent_together_run_in_dependency_order_within_the_turn(run_script, workspace):
    """The actor sends the dependent read before the write in one turn: the harness runs the write
    first and the read in a later wave, so the read sees what the write wrote."""
    report = await run_script(
        {"planner": [step({"steps": WRITE_THEN_READ})],
         "actor": [step(calls=[write("a.md", "A\\n"), read("a.md")]), step("a.md says A")], "critic": [CRITIC_PASS]},
        policy=ALLOW_WRITES, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    results = _results(report)
    assert "A" in str(results["call_actor_0_1"].content) and results["call_actor_0_1"].status == "success"
    observations = {obs["call_id"]: obs for obs in report.values["observations"]}
    assert observations["a0.0"]["ended_at"] <= observations["a0.1"]["started_at"]


async def test_a_held_call_whose_dependency_failed_in_its_turn_is_refused_unsent_and_its_budget_returned(run_script, workspace):
    """The write for s1 fails (a.md is a directory), so the read held for the next wave of the same
    turn is refused right before it would go out; the gate's reservation for it is handed back."""
    (workspace / "a.md").mkdir()
    report = await run_script(
        {"planner": [step({"steps": WRITE_THEN_READ})], "actor": [step(calls=[write("a.md", "A\\n"), read("a.md")])]},
        policy=ALLOW_WRITES, task={"budget": {"model_turns": 2}}, unattended=True, planning="always",
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    held = _results(report)["call_actor_0_1"]
    assert held.content == ("dependency_unmet: workspace__read_file serves plan step s2, which waits for s1 (not done). "
                            "The call was not made. Ready steps now: s1.")
    observations = {obs["call_id"]: obs for obs in report.values["observations"]}
    assert (observations["a0.0"]["status"], observations["a0.1"]["stage"], observations["a0.1"]["status"]) == (
        "tool_error", "intended", "dependency_unmet")
    usage = report.values["usage"]
    assert (usage["tool_calls"], usage["per_tool"], usage["side_effects"]) == (1, {"workspace__write_file": 1, "workspace__read_file": 0}, 1)


async def test_independent_read_only_steps_run_in_one_parallel_wave_before_the_step_that_needs_them(run_script, runner, workspace):
    """Three independent reads and the write that depends on all of them, sent in one turn: the reads
    go out as one superstep (one task each), the write in the next."""
    for name in ("f1.md", "f2.md", "f3.md"):
        (workspace / name).write_text(f"{name}\n")
    steps = [{"id": f"r{n}", "description": f"read f{n}.md", "tools": ["workspace__read_file"], "args": {"path": f"f{n}.md"}} for n in (1, 2, 3)]
    steps.append({"id": "w", "description": "write the summary", "tools": ["workspace__write_file"], "depends_on": ["r1", "r2", "r3"]})
    calls = [read("f1.md"), read("f2.md"), read("f3.md"), write("summary.md", "three files\\n")]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=calls), step("summarized")], "critic": [CRITIC_PASS]},
        policy=ALLOW_WRITES, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    supersteps = {event["data"]["call"]["call_id"]: event["data"]["step"] for event in await runner.trace(report.thread_id)
                  if event["node"] == "execute"}
    assert supersteps["a0.0"] == supersteps["a0.1"] == supersteps["a0.2"] < supersteps["a0.3"]
    assert (workspace / "summary.md").read_text() == "three files\\n"


async def test_a_step_the_plan_keeps_out_of_parallel_waves_runs_its_read_alone(run_script, runner, workspace):
    """Four independent reads; the plan marks r2 `parallel: false`: r1, then r2 alone, then r3 and r4 together."""
    for n in (1, 2, 3, 4):
        (workspace / f"f{n}.md").write_text(f"f{n}\n")
    steps = [{"id": f"r{n}", "description": f"read f{n}.md", "tools": ["workspace__read_file"], "args": {"path": f"f{n}.md"},
              "parallel": n != 2} for n in (1, 2, 3, 4)]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=[read(f"f{n}.md") for n in (1, 2, 3, 4)]), step("read")],
         "critic": [CRITIC_PASS]}, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    supersteps = {event["data"]["call"]["call_id"]: event["data"]["step"] for event in await runner.trace(report.thread_id)
                  if event["node"] == "execute"}
    assert supersteps["a0.0"] < supersteps["a0.1"] < supersteps["a0.2"] == supersteps["a0.3"]


async def test_a_step_that_keeps_failing_is_replanned_alone_and_the_done_step_never_runs_again(run_script, runner, workspace):
    """s1 writes a.md; s2 writes b.md, which is a directory, twice; s3 reads b.md. After s2's second
    failure the planner is asked to replace s2 and s3 only: s1 stays done with its one call, and the
    new steps write and read c.md. The re-plan is counted and traced with its cause."""
    (workspace / "b.md").mkdir()
    steps = [
        {"id": "s1", "description": "write a.md", "tools": ["workspace__write_file"], "args": {"path": "a.md"}},
        {"id": "s2", "description": "write b.md", "tools": ["workspace__write_file"], "args": {"path": "b.md"}, "depends_on": ["s1"]},
        {"id": "s3", "description": "read b.md", "tools": ["workspace__read_file"], "args": {"path": "b.md"}, "depends_on": ["s2"]},
    ]
    repaired = [
        {"id": "s1", "description": "a planner may not rewrite a kept step", "tools": ["workspace__list_files"]},
        {"id": "s2b", "description": "write c.md", "tools": ["workspace__write_file"], "args": {"path": "c.md"}, "depends_on": ["s1"]},
        {"id": "s3b", "description": "read c.md", "tools": ["workspace__read_file"], "args": {"path": "c.md"}, "depends_on": ["s2b"]},
    ]
    report = await run_script(
        {"planner": [step({"steps": steps}), step({"steps": repaired})],
         "actor": [step(calls=[write("a.md", "A\\n")]), step(calls=[write("b.md", "B\\n")]), step(calls=[write("b.md", "B, again\\n")]),
                   step(calls=[write("c.md", "C\\n")]), step(calls=[read("c.md")]), step("a.md and c.md written")],
         "critic": [CRITIC_PASS]},
        policy=ALLOW_WRITES, task={"budget": {"side_effects": 10}, "targets": ["c.md"]}, planning="always",
    )  # c.md is declared: a re-plan made after the run read a tool's output may not widen what it may change
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    plan = report.values["plan"]
    assert [(s["id"], s["status"]) for s in plan["steps"]] == [("s1", "done"), ("s2b", "done"), ("s3b", "done")]
    assert plan["steps"][0]["description"] == "write a.md" and plan["steps"][0]["verified"] == {"workspace__write_file": "a0.0"}
    assert await _ledger_tools(runner, report) == [
        ("a0.0", "write_file"), ("a1.0", "write_file"), ("a2.0", "write_file"), ("a3.0", "write_file")]
    assert [obs["call_id"] for obs in report.values["observations"] if obs.get("step_id") == "s1"] == ["a0.0"]
    assert report.values["usage"]["replans"] == 1
    [revision] = plan["revisions"]
    assert (revision["cause"], revision["replaced"], revision["kept"], revision["new"]) == ("step_failed", ["s2", "s3"], ["s1"], ["s2b", "s3b"])
    assert revision["reason"].startswith("step s2 failed 2 times, last: workspace__write_file (a2.0) ended tool_error")
    planner_brief = str(model_for(report.values["settings"]).last_request("planner")[1].content)
    assert "Kept as they are (do not return them; new steps may depend on them):\n- s1 [done]: write a.md" in planner_brief
    assert "Replace these, and return only the replacement steps (new ids or the same ones):\n- s2: write b.md" in planner_brief
    traced = [event["data"]["replan"] for event in await runner.trace(report.thread_id) if "replan" in event["data"]]
    assert traced == [revision]


async def test_a_step_that_keeps_failing_with_no_replan_left_ends_budget_exhausted_on_replans(run_script, workspace):
    (workspace / "b.md").mkdir()
    steps = [{"id": "s1", "description": "write b.md", "tools": ["workspace__write_file"], "args": {"path": "b.md"}}]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=[write("b.md", "B\\n")]), step(calls=[write("b.md", "B, again\\n")])]},
        policy=ALLOW_WRITES, task={"budget": {"replans": 0}}, unattended=True, planning="always",
    )
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "replans"
    assert report.values["ending"]["reason"].startswith(
        "budget.replans exhausted: 0 of 0 used; step s1 failed 2 times, last: workspace__write_file (a1.0) ended tool_error")
    assert report.values["ending"]["next_safe_action"] == "Keep the partial result, or run again with more re-plans (--budget replans=1)."
    assert report.values["usage"]["model_turns"] == 3


async def test_a_rejected_plan_is_repaired_step_by_step_and_the_valid_steps_are_kept(run_script):
    """Validation names s2 (a tool that does not exist); s3 depends on it. The planner is asked for
    s2 and s3 only; s1 and s4 come through exactly as first planned."""
    steps = [
        {"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"], "args": {"path": "notes.md"}},
        {"id": "s2", "description": "deploy", "tools": ["k8s__deploy"], "depends_on": ["s1"]},
        {"id": "s3", "description": "check the deploy", "tools": ["workspace__list_files"], "depends_on": ["s2"]},
        {"id": "s4", "description": "list the files", "tools": ["workspace__list_files"]},
    ]
    repaired = [{"id": "s2", "description": "summarize instead", "tools": [], "depends_on": ["s1"]}]
    report = await run_script(
        {"planner": [step({"steps": steps}), step({"steps": repaired})],
         "actor": [step(calls=[read("notes.md"), {"name": "workspace__list_files", "args": {}}]), step("Ana publishes the notes.")],
         "critic": [CRITIC_PASS]}, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    plan = report.values["plan"]
    assert [s["id"] for s in plan["steps"]] == ["s1", "s4", "s2"]
    assert {key: plan["steps"][1][key] for key in ("description", "tools")} == {"description": "list the files", "tools": ["workspace__list_files"]}
    [revision] = plan["revisions"]
    assert (revision["cause"], revision["replaced"], revision["kept"]) == ("validation", ["s2", "s3"], ["s1", "s4"])
    assert report.values["usage"]["replans"] == 1


async def test_a_replan_reply_that_is_not_a_plan_keeps_the_kept_steps_and_is_asked_again(run_script):
    steps = [
        {"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"], "args": {"path": "notes.md"}},
        {"id": "s2", "description": "deploy", "tools": ["k8s__deploy"], "depends_on": ["s1"]},
    ]
    repaired = [{"id": "s2", "description": "summarize", "tools": [], "depends_on": ["s1"]}]
    report = await run_script(
        {"planner": [step({"steps": steps}), step("sorry, here is prose"), step({"steps": repaired})],
         "actor": [step(calls=[read("notes.md")]), step("Ana publishes the notes.")], "critic": [CRITIC_PASS]}, planning="always",
    )
    assert report.status == Terminal.SUCCESS
    plan = report.values["plan"]
    assert [(s["id"], s["description"]) for s in plan["steps"]] == [("s1", "read the notes"), ("s2", "summarize")]
    assert [revision["replaced"] for revision in plan["revisions"]] == [["s2"]]
    assert report.values["usage"]["replans"] == 2
