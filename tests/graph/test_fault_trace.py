"""Tracing a failure to the plan step behind it (graph/quality/fault_trace.py) and the re-plan it asks for
(graph/quality/replan.py, nodes/repair.py), against hostile inputs: two writers of one file, `./` and
symlink spellings, failed and unbound calls, a critic naming a step that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from boundloop.graph.quality import replan
from boundloop.graph.quality.fault_trace import Writers, check_files, critic_step, writers
from boundloop.mcp_servers.workspace.server import build_server
from boundloop.nodes.repair import _replan_request
from boundloop.tools.registry import ToolHints, ToolRegistry, ToolSpec

STEPS = [
    {"id": "s1", "description": "write a.md", "status": "done"},
    {"id": "s2", "description": "write the summary", "status": "done", "depends_on": ["s1"]},
    {"id": "s3", "description": "read it back", "status": "done", "depends_on": ["s2"]},
    {"id": "s4", "description": "write the index", "status": "done"},
]


@pytest.fixture
async def registry(tmp_path: Path) -> ToolRegistry:
    """The real workspace server's tools (schemas with their path marks), rooted in a temporary directory."""
    root = tmp_path / "root"
    root.mkdir()
    tools = await build_server(root).list_tools()
    return ToolRegistry(ToolSpec("workspace", tool.name, tool.description or "", tool.input_schema, ToolHints.from_annotations(tool.annotations),
                                 trusted=True, root=str(root)) for tool in tools)


def wrote(call_id: str, step_id: str | None, ended_at: float, status: str = "ok", tool: str = "workspace__write_file") -> dict:
    return {"call_id": call_id, "tool": tool, "step_id": step_id, "side_effect": True, "status": status, "ended_at": ended_at}


def test_a_file_two_steps_wrote_is_traced_to_the_last_writer_and_the_trace_names_both(registry):
    observations = [wrote("a0.0", "s1", 1.0), wrote("a1.0", "s2", 2.0)]
    found = writers(observations, {"a0.0": {"path": "./notes/../summary.md"}, "a1.0": {"path": "summary.md"}}, registry)
    files, shown = check_files(registry.get("workspace__read_file"), {"path": "summary.md"}, None)
    assert found.trace(files, shown) == {"step": "s2", "trace": "s2 wrote summary.md (also written by s1; the last writer is taken)"}


def test_the_writer_is_the_step_that_wrote_last_by_time_not_by_list_order(registry):
    observations = [wrote("a0.0", "s1", 9.0), wrote("a1.0", "s2", 5.0)]
    found = writers(observations, {"a0.0": {"path": "x.md"}, "a1.0": {"path": "x.md"}}, registry)
    assert found.trace(*check_files(registry.get("workspace__read_file"), {"path": "./x.md"}, None))["step"] == "s1"


def test_a_symlink_to_a_file_a_step_wrote_is_traced_to_that_step(registry, tmp_path):
    root = tmp_path / "root"
    (root / "real.md").write_text("x")
    (root / "link.md").symlink_to(root / "real.md")
    found = writers([wrote("a0.0", "s1", 1.0)], {"a0.0": {"path": "real.md"}}, registry)
    assert found.trace(*check_files(registry.get("workspace__read_file"), {"path": "link.md"}, None))["step"] == "s1"


def test_failed_unbound_and_unrecorded_calls_write_nothing(registry):
    observations = [wrote("a0.0", "s1", 1.0, status="tool_error"), wrote("a1.0", None, 2.0), wrote("a2.0", "s3", 3.0),
                    wrote("a3.0", "s4", 4.0, tool="workspace__nonexistent")]
    sent = {"a0.0": {"path": "x.md"}, "a1.0": {"path": "x.md"}, "a3.0": {"path": "x.md"}}  # a2.0: no COMPLETE ledger entry
    assert writers(observations, sent, registry) == Writers()


def test_a_test_failure_location_is_read_from_the_checks_cwd_before_the_checks_own_paths(registry, tmp_path):
    spec = registry.get("workspace__read_file")
    files, shown = check_files(spec, {"path": "other.md", "cwd": "pkg"}, "tests/test_calc.py:5")
    root = tmp_path / "root"
    assert files == [str(root / "pkg/tests/test_calc.py"), str(root / "other.md")]
    assert shown[files[0]] == "tests/test_calc.py"


@pytest.mark.parametrize("location", ["test_calc.py", "test_calc.py:five", ":5", ""])
def test_a_location_that_is_not_file_colon_line_names_no_file(registry, location):
    assert check_files(registry.get("workspace__list_files"), {}, location) == ([], {})


def test_a_check_through_an_unknown_tool_names_no_file():
    assert check_files(None, {"path": "a.md"}, "a.py:1") == ([], {})


def test_the_critic_naming_a_step_the_plan_lacks_is_ignored_and_kept_only_as_a_note():
    defect = {"problem": "wrong total", "step": "s9", "location": "line 2"}
    assert critic_step(defect, STEPS, {}) == {"problem": "wrong total", "location": "line 2", "ignored_step": "s9"}


def test_the_critic_naming_a_plan_step_traces_the_defect_to_it():
    assert critic_step({"problem": "p", "step": "s2"}, STEPS, {})["step"] == "s2"


def test_a_defect_located_at_a_call_id_is_traced_to_the_step_that_call_served():
    assert critic_step({"problem": "p", "location": "a3.0", "step": ""}, STEPS, {"a3.0": "s4"}) == {
        "problem": "p", "location": "a3.0", "step": "s4", "trace": "a3.0 served s4"}


def test_a_traced_done_step_is_reopened_with_its_dependents_and_the_others_are_kept():
    pending = _replan_request(STEPS, [{"step": "s2"}, {"step": "s2"}, {}], "why")  # s2 named twice, and one untraced defect
    assert (pending["steps"], pending["traced"], pending["reopened"]) == (["s2", "s3"], ["s2"], ["s2", "s3"])
    assert [step["id"] for step in replan.kept(STEPS, pending)] == ["s1", "s4"]


def test_a_done_step_without_dependents_is_reopened_alone():
    pending = _replan_request(STEPS, [{"step": "s4"}], "why")
    assert (pending["steps"], pending["reopened"]) == (["s4"], ["s4"])
    assert [step["id"] for step in replan.kept(STEPS, pending)] == ["s1", "s2", "s3"]


def test_a_defect_traced_to_a_step_the_plan_no_longer_has_is_untraced():
    pending = _replan_request(STEPS, [{"step": "s2-old"}], "why")
    assert pending == {"cause": "verification", "reason": "why", "steps": []}
    assert [step["id"] for step in replan.kept(STEPS, pending)] == ["s1", "s2", "s3", "s4"]


def test_unfinished_steps_are_replaced_beside_the_reopened_ones():
    steps = [*STEPS[:3], {"id": "s4", "description": "write the index", "status": "failed", "tools": ["workspace__write_file"]}]
    pending = _replan_request(steps, [{"step": "s3"}], "why")
    assert (pending["steps"], pending["reopened"]) == (["s3", "s4"], ["s3"])
    assert [step["id"] for step in replan.kept(steps, pending)] == ["s1", "s2"]
