"""Binding calls to plan steps, holding them to dependencies, ordering them into waves, and the
steps a targeted re-plan replaces: pure functions, checked case by case."""

from __future__ import annotations

from boundloop.graph.quality import replan
from boundloop.graph import schedule
from boundloop.graph.core.plan import PlanReply

READ, WRITE, LIST = "workspace__read_file", "workspace__write_file", "workspace__list_files"


def _steps(*specs: tuple[str, list[str], list[str], str]) -> list[dict]:
    return [{"id": sid, "description": sid, "tools": tools, "depends_on": deps, "status": status} for sid, tools, deps, status in specs]


def test_a_call_for_a_step_whose_dependency_is_not_done_is_refused_with_the_missing_step():
    steps = _steps(("s1", [WRITE], [], "pending"), ("s2", [READ], ["s1"], "pending"))
    [binding] = schedule.bind(steps, [(READ, {"path": "a.md"}, True)])
    assert binding == schedule.Binding("s2", missing=("s1",))
    assert schedule.refusal(steps, READ, "s2", binding.missing) == (
        "dependency_unmet: workspace__read_file serves plan step s2, which waits for s1 (not done). "
        "The call was not made. Ready steps now: s1.")


def test_a_call_whose_dependency_an_earlier_call_of_the_turn_serves_waits_one_wave():
    """The model sent the dependent read first: it runs after the write, in the same turn."""
    steps = _steps(("s1", [WRITE], [], "pending"), ("s2", [READ], ["s1"], "pending"))
    bindings = schedule.bind(steps, [(WRITE, {}, False), (READ, {}, True)])
    assert bindings == [schedule.Binding("s1", 0), schedule.Binding("s2", 1)]
    calls = [{"call_id": "r", "read_only": True, "level": 1}, {"call_id": "w", "read_only": False, "level": 0}]
    assert [[call["call_id"] for call in wave] for wave in schedule.waves(calls, 4)] == [["w"], ["r"]]


def test_a_dependent_call_sent_before_its_dependency_in_the_same_turn_is_still_refused():
    """Order within the turn matters: only an earlier call can serve the dependency."""
    steps = _steps(("s1", [WRITE], [], "pending"), ("s2", [READ], ["s1"], "pending"))
    assert schedule.bind(steps, [(READ, {}, True), (WRITE, {}, False)])[0].missing == ("s1",)


def test_independent_ready_reads_share_one_wave_up_to_the_cap_and_a_write_runs_alone():
    steps = _steps(("a", [READ], [], "pending"), ("b", [LIST], [], "pending"), ("c", [WRITE], ["a", "b"], "pending"))
    bindings = schedule.bind(steps, [(READ, {}, True), (LIST, {}, True), (WRITE, {}, False)])
    assert [b.level for b in bindings] == [0, 0, 1]
    calls = [{"call_id": str(n), "read_only": n < 2, "level": b.level} for n, b in enumerate(bindings)]
    assert [[call["call_id"] for call in wave] for wave in schedule.waves(calls, 4)] == [["0", "1"], ["2"]]
    assert [[call["call_id"] for call in wave] for wave in schedule.waves(calls, 1)] == [["0"], ["1"], ["2"]]


def test_a_read_never_moves_ahead_of_an_earlier_write_and_a_solo_read_runs_alone():
    steps = _steps(("a", [WRITE], [], "pending"))
    bindings = schedule.bind(steps, [(WRITE, {}, False), (LIST, {}, True), (READ, {}, True)])
    assert [b.level for b in bindings] == [0, 0, 0]
    calls = [{"call_id": "w", "read_only": False}, {"call_id": "l", "read_only": True, "solo": True}, {"call_id": "r", "read_only": True}]
    assert [[call["call_id"] for call in wave] for wave in schedule.waves(calls, 4)] == [["w"], ["l"], ["r"]]


def test_a_call_serving_no_step_is_never_held_back_and_a_done_step_is_not_served_again():
    steps = _steps(("s1", [READ], [], "done"), ("s2", [WRITE], ["s1"], "pending"))
    assert schedule.bind(steps, [(LIST, {}, True), (READ, {}, True)]) == [schedule.Binding(None), schedule.Binding(None)]


def test_the_ready_set_is_every_step_not_done_whose_dependencies_are():
    steps = _steps(("a", [READ], [], "done"), ("b", [READ], ["a"], "pending"), ("c", [READ], ["b"], "pending"), ("d", [], [], "failed"))
    assert schedule.ready_steps(steps) == ["b", "d"]


def test_a_total_ordering_chains_each_step_to_the_one_before():
    reply = PlanReply.model_validate({"ordering": "total", "steps": [
        {"id": "a", "description": "a"}, {"id": "b", "description": "b"}, {"id": "c", "description": "c", "depends_on": ["a"]}]})
    assert [step["depends_on"] for step in reply.ordered_steps()] == [[], ["a"], ["a", "b"]]


def test_a_targeted_replan_replaces_the_broken_step_and_its_dependents_and_keeps_the_rest():
    steps = _steps(("a", [WRITE], [], "done"), ("b", [WRITE], ["a"], "failed"), ("c", [READ], ["b"], "pending"),
                   ("d", [READ], [], "pending"), ("e", [READ], ["c", "d"], "pending"))
    assert replan.affected(steps, {"b"}) == ["b", "c", "e"]
    pending = replan.request("step_failed", "b failed", ["b", "c", "e"])
    keep = replan.kept(steps, pending)
    assert [step["id"] for step in keep] == ["a", "d"]
    merged = replan.merge(keep, [{"id": "a", "description": "rewritten", "status": "pending"}, {"id": "b2", "description": "b2"}])
    assert [step["id"] for step in merged] == ["a", "d", "b2"] and merged[0]["status"] == "done"


def test_a_whole_plan_replan_still_keeps_the_done_steps():
    steps = _steps(("a", [WRITE], [], "done"), ("b", [WRITE], [], "pending"))
    assert [step["id"] for step in replan.kept(steps, replan.request("validation", "over budget", []))] == ["a"]
