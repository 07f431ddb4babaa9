"""check: the graph's build-time check, run on the real compiled graph before any run uses it.

1. every node but finalize has a legal outgoing transition; finalize's only exit is END;
2. every cycle passes a node whose entry is bounded by a budget dimension in state;
3. every node can reach finalize, and END is reachable only through finalize.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from langgraph.graph.state import CompiledStateGraph

TERMINAL = "finalize"
BOUNDED_BY: dict[str, str] = {
    "plan": "budget.replans and budget.model_turns",
    "act": "budget.model_turns and budget.tool_calls",
    "repair": "budget.repairs",
    "escalate": "budget.escalations (and a human answers each one)",
    "approve": "the turn's pending approvals (each call is decided once, then leaves the queue)",
    "execute": "the turn's dispatch waves (each wave runs once, then act's grounding removes it)",
}
"""Nodes whose every entry is guarded by a budget dimension; each cycle must pass one."""


class GraphCheckError(Exception):
    """The compiled graph breaks a compilation rule; the message names the node and the edge."""


def check_graph(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> None:
    drawn = compiled.get_graph()
    edges: dict[str, set[str]] = defaultdict(set)
    for edge in drawn.edges:
        edges[edge.source].add(edge.target)
    nodes = [node for node in drawn.nodes if node not in {"__start__", "__end__"}]
    for node in nodes:
        if not edges[node]:
            raise GraphCheckError(f"node {node!r} has no outgoing transition")
        if "__end__" in edges[node] and node != TERMINAL:
            raise GraphCheckError(f"edge {node}→END bypasses {TERMINAL}: only {TERMINAL} may end a run")
    if edges[TERMINAL] != {"__end__"}:
        raise GraphCheckError(f"{TERMINAL} must lead only to END, found {sorted(edges[TERMINAL])}")
    for node in nodes:
        if not _reaches(edges, node, TERMINAL):
            raise GraphCheckError(f"node {node!r} cannot reach {TERMINAL}")
    if cycle := _unbounded_cycle(edges, set(BOUNDED_BY)):
        raise GraphCheckError(f"cycle {'→'.join(cycle)} has no bound in state (none of {sorted(BOUNDED_BY)})")


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, frontier = {start}, [start]
    while frontier:
        node = frontier.pop()
        if node == goal:
            return True
        for target in edges[node] - seen:
            seen.add(target)
            frontier.append(target)
    return False


def _unbounded_cycle(edges: dict[str, set[str]], bounded: set[str]) -> list[str] | None:
    """A cycle that survives removing every bounded node is a cycle nothing bounds."""
    path: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(edges[node]):
            if target in bounded or target == "__end__":
                continue
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in bounded and node not in state and (cycle := visit(node)):
            return cycle
    return None
