"""replay: rebuild a run's trajectory from its trace and check it against the compiled graph
(trajectory validity: every transition an edge of the graph).

The legal transitions are read from the graph object itself (its drawn nodes and edges), never
from a list of node names here, so a graph with other steps is judged by its own edges. Checked:
every transition between consecutive recorded steps is an edge of the graph (from START to the
first step, into END after the last), every tool call that ran was decided first (allowed by
the gate, or asked and approved by a human; a provider-hosted call by its offering at intake or
its approval), every side effect sent has its ledger INTENT, written after its permission
decision and before its outcome was recorded (a hosted one is written when the provider reports it),
every conditional transition is the one its guard picks when run again on the checkpoint it decided
from (graph/trace/guard_check.py), and the trace's hash chain is whole (checkpoints/store.py
`trace_chain_problems`): an edit made with the database's triggers stepped around shows where it
happened, even where the trajectory it leaves is still a legal one. A chain rewritten whole, hashes recomputed, shows only against a head kept
outside the database: `boundloop show` prints it, `boundloop replay --expect-head` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import store
from boundloop.graph.trace.guard_check import guard_problems
from boundloop.graph.trace.record import REOPENABLE
from boundloop.tools.registry import qualified_name

SENT = frozenset({"ok", "tool_error", "timeout", "cancelled", "unknown_after_crash"})
"""Outcomes of a call that reached its server (a side effect among them needs its ledger INTENT)."""
APPROVED = frozenset({"approve", "edit"})
STEP_KINDS = ("node", "call")
"""Events that record a node's step: a phase (`node`) or a tool task (`call`)."""


@dataclass
class ReplayReport:
    run_id: str
    valid: bool
    problems: list[str] = field(default_factory=list)
    transitions: list[tuple[str, str]] = field(default_factory=list)


async def replay_run(pool: AsyncConnectionPool, run_id: str, compiled_graph: CompiledStateGraph, expected_head: str | None = None) -> ReplayReport:
    """The run's replay report; `expected_head` is a trace head kept outside the database (`boundloop show`)."""
    events = await store.read_trace(pool, run_id)
    ledger = {entry.call_id: entry for entry in await store.run_ledger(pool, run_id)}
    drawn = compiled_graph.get_graph()
    edges = {(edge.source, edge.target) for edge in drawn.edges}
    problems: list[str] = []
    if not events:
        return ReplayReport(run_id, False, [f"run {run_id!r} has no trace"])
    steps = _steps([event for event in events if event.kind in STEP_KINDS], set(drawn.nodes), problems)
    transitions = _transitions(steps, edges, problems)
    problems += await guard_problems(compiled_graph, run_id, _guarded(steps))
    _check_calls(events, ledger, problems)
    problems += await store.trace_chain_problems(pool, run_id, expected_head)
    return ReplayReport(run_id, not problems, problems, transitions)


def _steps(events: list[Any], known: set[str], problems: list[str]) -> list[list[Any]]:
    """Node events grouped by superstep, in order; a step recorded out of order is a problem."""
    groups: list[list[Any]] = []
    for event in events:
        step = event.data.get("step")
        if event.node not in known:
            problems.append(f"event {event.id}: node {event.node!r} is not in the graph")
            continue
        if step is None:
            problems.append(f"event {event.id}: {event.node} has no step number")
            continue
        if groups and step == groups[-1][0].data["step"]:
            groups[-1].append(event)
        elif groups and step < groups[-1][0].data["step"]:
            problems.append(f"event {event.id}: {event.node} at step {step} recorded after step {groups[-1][0].data['step']}")
        else:
            groups.append([event])
    return groups


def _transitions(steps: list[list[Any]], edges: set[tuple[str, str]], problems: list[str]) -> list[tuple[str, str]]:
    transitions: list[tuple[str, str]] = []
    before: list[Any] = []
    for group in steps:
        sources = [event.node for event in before] or ["__start__"]
        for node in dict.fromkeys(event.node for event in group):
            source = next((name for name in sources if (name, node) in edges), None)
            if source is None and (reopened := _reopened_from(before, node)):
                source = reopened
            elif source is None:
                problems.append(f"step {group[0].data['step']}: {' | '.join(dict.fromkeys(sources))} → {node} is not an edge of the graph")
                source = sources[0]
            transitions.append((source, node))
        before = group
    last = {event.node for event in before}
    ended = [name for name in last if (name, "__end__") in edges]
    if ended:
        transitions.append((ended[0], "__end__"))
    return transitions


def _guarded(steps: list[list[Any]]) -> list[tuple[list[Any], list[Any]]]:
    """Each step with the step after it, but where the run was reopened: no guard picked that one."""
    return [(before, group) for before, group in zip(steps, steps[1:]) if not any(_reopened_from(before, event.node) for event in group)]


def _reopened_from(before: list[Any], node: str) -> str | None:
    """A run that ended on a dependency continues at the phase it named (runner._reopening)."""
    for event in before:
        ending = event.data.get("ending") or {}
        if ending.get("code") in REOPENABLE and ending.get("resume_to") == node:
            return event.node
    return None


def _check_calls(events: list[Any], ledger: dict[str, Any], problems: list[str]) -> None:
    """No call runs without its permission decision; no side effect without its ledger INTENT."""
    decided: dict[str, tuple[str, Any]] = {}
    approved: set[str] = set()
    offered: dict[str, Any] = {}
    step_began: Any = None
    """When the current step began, at the latest: the previous step's event was written before it."""
    for event in events:
        data = event.data if event.kind in STEP_KINDS else {}
        for offer in ((data.get("run") or {}).get("allowed") or {}).get("hosted") or []:
            offered.update({name: event.at for name in _offered_names(offer)})
        for decision in data.get("decisions", []):
            # a call decided and run in one step (verify's checks) was decided when that step began
            ran_here = any(call.get("request_id") == decision["call_id"] for call in data.get("tool_calls", []))
            decided[decision["call_id"]] = (decision["decision"], step_began if ran_here and step_began is not None else event.at)
        if data:
            step_began = event.at
        escalation = data.get("escalation") or {}
        if escalation.get("type") == "tool_approval" and escalation.get("decision") in APPROVED | {"respond"}:
            approved.add(escalation["call_id"])
        for call in data.get("tool_calls", []):
            call_id = call.get("request_id")
            decision, decided_at = decided.get(call_id, (None, None))
            if decision is None and call.get("hosted") and call.get("name") in offered:  # the offering at intake decided it
                decision, decided_at = "allow", offered[call["name"]]
            if decision is None:
                problems.append(f"event {event.id}: tool call {call_id} ({call.get('name')}) ran with no permission decision before it (gate skipped)")
                continue
            if decision != "allow" and not (decision == "ask" and call_id in approved):
                problems.append(f"event {event.id}: tool call {call_id} ({call.get('name')}) ran although the decision was {decision!r}")
                continue
            if not call.get("side_effect") or escalation.get("decision") == "respond" or call.get("status") not in SENT:
                continue
            entry = ledger.get(call_id)
            if entry is None:
                problems.append(f"event {event.id}: side effect {call_id} ({call.get('name')}) has no ledger INTENT")
            elif not decided_at <= entry.created_at <= event.at:
                problems.append(f"event {event.id}: side effect {call_id}: ledger INTENT at {entry.created_at} is not between its decision and its outcome")
            elif call.get("ledger_key") not in (None, entry.idempotency_key):
                problems.append(f"event {event.id}: side effect {call_id}: ledger key {call.get('ledger_key')} is not the ledger's {entry.idempotency_key}")


def _offered_names(offer: dict[str, Any]) -> list[str]:
    """The tool names a hosted offering let the provider call without asking (tools/hosted.py)."""
    if not offer.get("offered"):
        return []
    if offer.get("type") != "mcp":
        return [qualified_name(offer["name"], offer["type"])]
    return [qualified_name(offer["name"], tool) for tool, decided in (offer.get("tools") or {}).items() if decided.get("decision") == "allow"]
