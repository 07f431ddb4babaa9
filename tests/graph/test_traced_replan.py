"""A verification failure traced to the step that wrote the faulty file re-plans that step and its
dependents alone, end to end on real Postgres, the real workspace MCP server and the real graph:
the earlier verified step stays done and its call is never made again."""

from __future__ import annotations

from boundloop.checkpoints import store
from boundloop.graph.models.catalog import model_for
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_FAIL, CRITIC_PASS, step

ALLOW_WRITES = {"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]}
STEPS = [
    {"id": "s1", "description": "write a.md", "tools": ["workspace__write_file"], "args": {"path": "a.md"}},
    {"id": "s2", "description": "write the summary", "tools": ["workspace__write_file"], "args": {"path": "summary.md"}, "depends_on": ["s1"]},
    {"id": "s3", "description": "read the summary back", "tools": ["workspace__read_file"], "args": {"path": "summary.md"}, "depends_on": ["s2"]},
]
OWNER_CHECK = {"name": "summary names the owner", "tool": "workspace__read_file", "args": {"path": "./summary.md"}, "expect_contains": "Ana"}


def write(path: str, content: str) -> dict:
    return {"name": "workspace__write_file", "args": {"path": path, "content": content}}


def read(path: str) -> dict:
    return {"name": "workspace__read_file", "args": {"path": path}}


async def test_a_check_failing_on_s2s_file_replans_s2_and_s3_only_and_s1_runs_once(run_script, runner, workspace):
    """s2 writes summary.md without the owner; the artifact check (spelt `./summary.md`) fails twice,
    so the second repair re-plans. The failure is traced to s2, the step that wrote the file: s2 and
    its dependent s3 are reopened and replaced, s1 stays done with its one call."""
    repaired = [
        {"id": "s2b", "description": "write the summary with the owner", "tools": ["workspace__write_file"],
         "args": {"path": "summary.md"}, "depends_on": ["s1"]},
        {"id": "s3b", "description": "read it back", "tools": ["workspace__read_file"], "args": {"path": "summary.md"}, "depends_on": ["s2b"]},
    ]
    report = await run_script(
        {"planner": [step({"steps": STEPS}), step({"steps": repaired})],
         "actor": [step(calls=[write("a.md", "A\\n")]), step(calls=[write("summary.md", "someone publishes\\n")]), step(calls=[read("summary.md")]),
                   step("summary written"), step("summary written, again"),
                   step(calls=[write("summary.md", "Ana publishes\\n")]), step(calls=[read("summary.md")]), step("Ana publishes")],
         "critic": [CRITIC_FAIL, CRITIC_FAIL, CRITIC_PASS]},
        policy=ALLOW_WRITES, task={"checks": [OWNER_CHECK], "budget": {"side_effects": 10}}, unattended=True, planning="always",
    )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    failures = [repair["diagnosis"][0] for repair in report.values["quality"]["repairs"]]
    assert [(defect["step"], defect["trace"]) for defect in failures] == [("s2", "s2 wrote summary.md")] * 2
    assert [repair["strategy"] for repair in report.values["quality"]["repairs"]] == ["SECTION_REWRITE", "REPLAN"]
    plan = report.values["plan"]
    assert [(s["id"], s["status"]) for s in plan["steps"]] == [("s1", "done"), ("s2b", "done"), ("s3b", "done")]
    assert plan["steps"][0]["verified"] == {"workspace__write_file": "a0.0"}
    [revision] = plan["revisions"]
    assert {key: revision[key] for key in ("cause", "replaced", "kept", "new", "traced", "reopened")} == {
        "cause": "verification", "replaced": ["s2", "s3"], "kept": ["s1"], "new": ["s2b", "s3b"], "traced": ["s2"], "reopened": ["s2", "s3"]}
    assert "[traced to step s2: s2 wrote summary.md]" in revision["reason"]
    s1_calls = [obs["call_id"] for obs in report.values["observations"] if obs.get("step_id") == "s1"]
    assert s1_calls == ["a0.0"]
    ledger = [(entry.call_id, entry.step_id, entry.result["arguments"]["path"]) for entry in await store.run_ledger(runner.pool, report.thread_id)]
    assert [entry for entry in ledger if entry[2] == "a.md"] == [("a0.0", "s1", "a.md")]
    assert (workspace / "summary.md").read_text() == "Ana publishes\\n"
    planner_brief = str(model_for(report.values["settings"]).last_request("planner")[1].content)
    assert "Kept as they are (do not return them; new steps may depend on them):\n- s1 [done]: write a.md\n" in planner_brief
    assert ("- s2: write the summary (done, but verification traced a failure to it or to a step it depends on)\n"
            "- s3: read the summary back (done, but verification traced a failure to it or to a step it depends on)") in planner_brief
    traced = [event["data"]["replan"] for event in await runner.trace(report.thread_id) if "replan" in event["data"]]
    assert traced == [revision]


async def test_a_step_the_critic_names_is_reopened_and_a_step_it_invents_is_ignored(run_script, runner, workspace):
    """No check: the critic traces its defect to s2 (and names s9, which the plan lacks). The second
    repair re-plans s2 and its dependent s3; s1 keeps its one call; s9 is noted, never trusted."""
    critic_fail = step({"scores": {"correctness": 0.5, "completeness": 0.5, "coherence": 0.9, "safety": 1},
                        "defects": [{"problem": "the summary does not name the owner", "step": "s2"}, {"problem": "no owner", "step": "s9"}]})
    repaired = [{"id": "s2", "description": "write the summary with the owner", "tools": ["workspace__write_file"],
                 "args": {"path": "summary.md"}, "depends_on": ["s1"]}]
    report = await run_script(
        {"planner": [step({"steps": STEPS}), step({"steps": repaired})],
         "actor": [step(calls=[write("a.md", "A\\n")]), step(calls=[write("summary.md", "someone publishes\\n")]), step(calls=[read("summary.md")]),
                   step("summary written"), step("summary written, again"), step(calls=[write("summary.md", "Ana publishes\\n")]), step("Ana publishes")],
         "critic": [critic_fail, critic_fail, CRITIC_PASS]},
        policy=ALLOW_WRITES, task={"budget": {"side_effects": 10}}, unattended=True, planning="always",
    )
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    diagnosis = report.values["quality"]["repairs"][-1]["diagnosis"]
    assert [(defect.get("step"), defect.get("ignored_step")) for defect in diagnosis] == [("s2", None), (None, "s9")]
    plan = report.values["plan"]
    assert [(s["id"], s["description"], s["status"]) for s in plan["steps"]] == [
        ("s1", "write a.md", "done"), ("s2", "write the summary with the owner", "done")]
    [revision] = plan["revisions"]
    assert (revision["replaced"], revision["traced"], revision["reopened"], revision["kept"]) == (["s2", "s3"], ["s2"], ["s2", "s3"], ["s1"])
    assert [obs["call_id"] for obs in report.values["observations"] if obs.get("step_id") == "s1"] == ["a0.0"]
    assert [entry.call_id for entry in await store.run_ledger(runner.pool, report.thread_id) if entry.step_id == "s1"] == ["a0.0"]
