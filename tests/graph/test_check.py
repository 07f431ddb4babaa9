"""The graph's build-time check, on the real compiled graph."""

from __future__ import annotations

import pytest
from langgraph.graph import END, START, StateGraph

from boundloop.graph.builder import build_graph
from boundloop.graph.check import GraphCheckError, check_graph
from boundloop.graph.state import LoopState


async def _noop(state: dict) -> dict:
    return {}


def test_the_compiled_loop_passes_every_compilation_rule():
    """Every node has an exit, every path reaches finalize, every cycle passes a bounded node."""
    check_graph(build_graph())


def test_an_edge_to_end_that_bypasses_finalize_is_refused():
    builder = StateGraph(LoopState)
    for name in ("act", "finalize"):
        builder.add_node(name, _noop)
    builder.add_edge(START, "act")
    builder.add_conditional_edges("act", lambda state: "finalize", ["finalize", END])
    builder.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="edge act→END bypasses finalize"):
        check_graph(builder.compile())


def test_a_cycle_without_a_bounded_node_is_refused_and_named():
    builder = StateGraph(LoopState)
    for name in ("gate", "observe", "finalize"):
        builder.add_node(name, _noop)
    builder.add_edge(START, "gate")
    builder.add_edge("gate", "observe")
    builder.add_conditional_edges("observe", lambda state: "gate", ["gate", "finalize"])
    builder.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="cycle gate→observe→gate has no bound in state"):
        check_graph(builder.compile())


def test_a_node_that_cannot_reach_finalize_is_refused():
    builder = StateGraph(LoopState)
    for name in ("plan", "stuck", "finalize"):
        builder.add_node(name, _noop)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", lambda state: "finalize", ["finalize", "stuck"])
    builder.add_edge("stuck", "plan")
    builder.add_edge("finalize", END)
    check_graph(builder.compile())  # stuck → plan → finalize: reachable, and the cycle passes plan
    lonely = StateGraph(LoopState)
    for name in ("a", "b", "finalize"):
        lonely.add_node(name, _noop)
    lonely.add_edge(START, "a")
    lonely.add_conditional_edges("a", lambda state: "finalize", ["finalize", "b"])
    lonely.add_edge("b", "b")
    lonely.add_edge("finalize", END)
    with pytest.raises(GraphCheckError, match="node 'b' cannot reach finalize"):
        check_graph(lonely.compile())
