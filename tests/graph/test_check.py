"""The graph's build-time check: bounds read from the guards' code, mutations that must fail it, and
small graphs that break one rule each."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from collections.abc import Callable
from typing import Any, Literal

import pytest
from langgraph.graph import END, START, StateGraph

from boundloop.graph import guards
from boundloop.graph.builder import build_graph
from boundloop.graph.check import GraphCheckError, check_graph, edge_bounds, guard_bounds, writes_trace
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopState
from boundloop.graph.trace.record import record_node


async def _noop(state: dict) -> dict:
    return {}


async def _finalize(state: dict) -> dict:
    """A finalize that writes its trace event, as the real one does (never run here)."""
    await record_node(Services(), current_run_id(), "finalize", state, {}, 0.0)
    return {}


def _plan_guard(state: LoopState) -> Literal["stuck", "finalize"]:
    """Back round the cycle only while the model budget allows."""
    return "stuck" if guards.may_call_model(state) else "finalize"


def _mutated(function: Callable[..., Any], drop: Callable[[ast.stmt], bool]) -> Callable[..., Any]:
    """A copy of `function` without the statements `drop` picks, compiled from its own source with
    the same globals (the source is registered, so the check reads the copy as it reads the original)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef)
    kept = [statement for statement in definition.body if not drop(statement)]
    assert len(kept) < len(definition.body), "the mutation removed nothing"
    definition.body = kept
    source = ast.unparse(tree) + "\n"
    filename = f"<mutated {function.__name__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), function.__globals__, namespace)  # noqa: S102  (the project's own guard, one check removed)
    return namespace[function.__name__]


def test_the_loop_bounds_every_cycle_with_a_guard_read_from_its_code():
    """The bounds come from the guards: the actor's turn is bounded by the model budget, the
    dispatch and approval fan-outs by their queues; only unconditional edges bound nothing."""
    graph = build_graph()
    bounds = edge_bounds(graph)
    assert bounds[("act", "act")] == "may_call_model"
    assert bounds[("repair", "plan")] == "may_call_model"
    assert bounds[("validate_plan", "plan")] == "must_stop"
    assert "_escalations_left" in bounds[("escalate", "escalate")]  # a human is asked again only while escalations are left
    assert bounds[("act", "execute")].startswith("one task per pending item of")
    assert bounds[("act", "approve")].startswith("one task per pending item of")
    drawn = {(edge.source, edge.target) for edge in graph.get_graph().edges if not edge.conditional}
    assert not drawn & set(bounds) and {("execute", "act"), ("approve", "act"), ("remember", "finalize")} <= drawn
    assert writes_trace(graph, "finalize") and not writes_trace(graph, "execute")  # a tool task writes task events, not the ending


def test_a_guard_helper_without_its_budget_check_makes_the_real_graph_fail(monkeypatch: pytest.MonkeyPatch):
    """The actor's next turn after its tool calls is bounded only by `_next_model_step`'s budget
    check; a copy without it, compiled into the real graph, leaves act→act unbounded."""
    unchecked = _mutated(guards._next_model_step, lambda statement: isinstance(statement, ast.If) and "may_call_model" in ast.unparse(statement.test))
    assert guard_bounds(unchecked) == {"plan": {None}, "act": {None}}
    monkeypatch.setattr(guards, "_next_model_step", unchecked)
    with pytest.raises(GraphCheckError, match="cycle act→act has no bound in state"):
        build_graph()


def test_stop_tests_without_the_budget_leave_the_planning_cycle_unbounded(monkeypatch: pytest.MonkeyPatch):
    """With the budget checks cut from `must_stop` and `may_call_model` (only the ending and the
    tripwires left), no guard on plan→validate_plan→plan consults a budget."""
    monkeypatch.setattr(guards, "must_stop", lambda state: bool(state.get("ending")) or guards.tripped(state) is not None)
    monkeypatch.setattr(guards, "may_call_model", lambda state: not guards.must_stop(state))
    with pytest.raises(GraphCheckError, match="has no bound in state"):
        build_graph()


def test_an_edge_to_end_that_bypasses_finalize_is_refused():
    builder = StateGraph(LoopState)
    builder.add_node("act", _noop)
    builder.add_node("finalize", _finalize)
    builder.add_edge(START, "act")
    builder.add_conditional_edges("act", lambda state: "finalize", ["finalize", END])
    builder.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="edge act→END bypasses finalize"):
        check_graph(builder.compile())


def test_a_cycle_without_a_guard_that_consults_a_budget_is_refused_and_named():
    builder = StateGraph(LoopState)
    for name in ("gate", "observe"):
        builder.add_node(name, _noop)
    builder.add_node("finalize", _finalize)
    builder.add_edge(START, "gate")
    builder.add_edge("gate", "observe")
    builder.add_conditional_edges("observe", lambda state: "gate", ["gate", "finalize"])
    builder.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="cycle gate→observe→gate has no bound in state"):
        check_graph(builder.compile())


def test_a_node_that_cannot_reach_finalize_is_refused():
    builder = StateGraph(LoopState)
    for name in ("plan", "stuck"):
        builder.add_node(name, _noop)
    builder.add_node("finalize", _finalize)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", _plan_guard)
    builder.add_edge("stuck", "plan")
    builder.add_edge("finalize", END)
    check_graph(builder.compile())  # stuck → plan → finalize: reachable, and plan's guard bounds the cycle
    lonely = StateGraph(LoopState)
    for name in ("a", "b"):
        lonely.add_node(name, _noop)
    lonely.add_node("finalize", _finalize)
    lonely.add_edge(START, "a")
    lonely.add_conditional_edges("a", lambda state: "finalize", ["finalize", "b"])
    lonely.add_edge("b", "b")
    lonely.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="node 'b' cannot reach finalize"):
        check_graph(lonely.compile())


def test_a_path_to_end_whose_last_node_writes_no_trace_is_refused():
    builder = StateGraph(LoopState)
    builder.add_node("finalize", _noop)
    builder.add_edge(START, "finalize")
    builder.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="path finalize→END writes no trace"):
        check_graph(builder.compile())
