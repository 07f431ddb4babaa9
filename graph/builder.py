"""builder: assemble the phase nodes and guard edges into the boundloop StateGraph.

`build_graph(checkpointer=...)` is the Python entry point; `boundloop.graph.server` exports the same graph
without a checkpointer for `langgraph dev` (the server supplies Postgres through langgraph.json).
"""

from __future__ import annotations

import functools
import time
from contextlib import asynccontextmanager, nullcontext
from collections.abc import Mapping
from typing import Any, AsyncIterator, Awaitable, Callable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.errors import GraphInterrupt
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from boundloop.graph.core import deadline
from boundloop.graph import guards, sends
from boundloop.graph.trace import langsmith as langsmith_trace
from boundloop.graph.core.budget import add_usage, sparse
from boundloop.graph.check import check_graph
from boundloop.graph.core.faults import crash_point
from boundloop.graph.models import write_ahead
from boundloop.graph.trace.progress import PHASE_PROGRESS_STREAMED, phase_progress
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.graph.task import RunInput, RunSettings
from boundloop.graph.trace.record import graph_version, record_interrupt, record_node, record_task
from boundloop.nodes.act import act
from boundloop.nodes.approve import approve
from boundloop.nodes.commit import commit
from boundloop.nodes.compact import compact
from boundloop.nodes.critique import critique
from boundloop.nodes.escalate import escalate
from boundloop.nodes.execute import execute
from boundloop.nodes.finalize import finalize
from boundloop.nodes.intake import intake
from boundloop.nodes.plan import plan
from boundloop.nodes.remember import remember
from boundloop.nodes.repair import repair
from boundloop.nodes.retrieve import retrieve
from boundloop.nodes.validate_plan import validate_plan
from boundloop.nodes.verify import verify
from boundloop.nodes.weigh import weigh

Node = Callable[..., Awaitable[LoopUpdate]]
RECURSION_LIMIT = 10_000
"""Graph steps one run may take (LangGraph's own default is 25 in some paths); budgets stop runs long before."""

PHASES: dict[str, Node] = {
    "plan": plan,
    "validate_plan": validate_plan,
    "retrieve": retrieve,
    "act": act,
    "compact": compact,
    "verify": verify,
    "critique": critique,
    "weigh": weigh,
    "repair": repair,
    "commit": commit,
    "remember": remember,
    "escalate": escalate,
    "finalize": finalize,
}
TOOL_TASKS: dict[str, Node] = {"execute": execute, "approve": approve}
"""Nodes run once per tool call (sent by the guards); their time is counted by act's grounding, not here."""


def build_graph(*, checkpointer: BaseCheckpointSaver | None = None, services: Services | None = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled loop. Pass a checkpointer for Python use; the server supplies its own."""
    services = services or Services()
    builder = StateGraph(LoopState, context_schema=RunSettings, input_schema=RunInput, output_schema=LoopState)
    builder.add_node("intake", _intake_node(services))
    for name, node in PHASES.items():
        builder.add_node(name, _phase_node(name, node, services))
    for name, node in TOOL_TASKS.items():
        builder.add_node(name, _task_node(node, services, calls_tool=name == "execute"))
    builder.add_edge(START, "intake")
    builder.add_conditional_edges("intake", _inline(guards.route_after_intake))
    builder.add_conditional_edges("plan", _inline(guards.route_after_plan))
    builder.add_conditional_edges("validate_plan", _inline(guards.route_after_validate))
    builder.add_conditional_edges("retrieve", _inline(guards.route_after_retrieve))
    tool_routes = ["approve", "execute", "act", "plan", "escalate", "finalize"]
    builder.add_conditional_edges("act", _inline(guards.route_after_act), ["compact", "verify", "critique", "repair", *tool_routes])
    builder.add_conditional_edges("compact", _inline(guards.route_after_compact))
    builder.add_edge("execute", "act")  # act grounds the results first (nodes/act.py)
    builder.add_edge("approve", "act")
    builder.add_conditional_edges("verify", _inline(guards.route_after_verify))
    builder.add_conditional_edges("critique", _inline(guards.route_after_critique))
    builder.add_conditional_edges("weigh", _inline(guards.route_after_weigh))
    builder.add_conditional_edges("repair", _inline(guards.route_after_repair))
    builder.add_conditional_edges("commit", _inline(guards.route_after_commit))
    builder.add_edge("remember", "finalize")
    builder.add_conditional_edges("escalate", _inline(guards.route_after_escalate))
    builder.add_edge("finalize", END)
    compiled = builder.compile(checkpointer=checkpointer, name="boundloop")
    check_graph(compiled)
    services.graph_version = graph_version(compiled)
    return compiled.with_config(recursion_limit=RECURSION_LIMIT)


def _intake_node(services: Services) -> Node:
    async def intake_node(state: LoopState, runtime: Runtime[RunSettings]) -> LoopUpdate:
        async with services.stops.node(current_run_id()):
            started = time.perf_counter()
            update = await intake(state, runtime, services)
            return await _settle("intake", state, update, started, services)

    return intake_node


def _phase_node(name: str, node: Node, services: Services) -> Node:
    async def phase_node(state: dict[str, Any]) -> LoopUpdate:
        async with services.stops.node(current_run_id()):
            crash_point(f"enter:{name}")
            write_ahead.begin_execution()
            started = time.perf_counter()
            async with _interrupts_traced(name, services):
                with deadline.step_deadline(deadline.budget_left_s(state.get("budget"), state.get("usage"))):
                    update = await node(state, services)
            return await _settle(name, state, update, started, services)

    phase_node.__name__ = name
    return phase_node


def _task_node(node: Node, services: Services, *, calls_tool: bool) -> Node:
    async def task_node(sent: dict[str, Any]) -> LoopUpdate:
        crash_point(f"enter:{node.__name__}")
        write_ahead.begin_execution()
        payload = guards.task_payload(sends.task_state(), node.__name__, sends.call_id(sent))  # the Send names the call only (graph/sends.py)
        async with services.stops.node(current_run_id()):
            started = time.perf_counter()
            with langsmith_trace.tool_run(payload) if calls_tool else nullcontext(lambda calls: None) as traced:
                async with _interrupts_traced(node.__name__, services):
                    with deadline.step_deadline(payload.get("wall_clock_left_s")):
                        update = await node(payload, services)
                traced(await record_task(services, current_run_id(), node.__name__, payload, update, time.perf_counter() - started))
            return update

    task_node.__name__ = node.__name__
    return task_node


def _inline(route: Callable[[LoopState], Any]) -> Callable[[LoopState], Awaitable[Any]]:
    """The guard as a coroutine, so LangGraph runs it on the event loop: a plain `def` edge is sent
    to its thread pool at every step, a hand-off that costs far more than the guard's pure work.
    `wraps` keeps the name and the `Literal` return type the graph draws its edges from."""

    @functools.wraps(route)
    async def inline(state: LoopState) -> Any:
        return route(state)

    return inline


@asynccontextmanager
async def _interrupts_traced(name: str, services: Services) -> AsyncIterator[None]:
    """A node that stops to ask a human leaves an `interrupt` event with its requests."""
    try:
        yield
    except GraphInterrupt as stopped:
        await record_interrupt(services, current_run_id(), name, list(stopped.args[0]) if stopped.args else [])
        raise


async def _settle(name: str, state: Mapping[str, Any], update: LoopUpdate, started: float, services: Services) -> LoopUpdate:
    """Charge the node's active time to the wall-clock budget, write its trace event, and stream
    the phase's progress to `custom` stream consumers (Studio, SDK clients; a no-op otherwise)."""
    elapsed = time.perf_counter() - started
    update["usage"] = sparse(add_usage(update.get("usage"), {"wall_clock_s": elapsed}))
    if "status" in update and update["status"] == state.get("status"):
        del update["status"]  # e.g. act's `gated` turn after turn: an unchanged channel is not written (each write is a row)
    await record_node(services, current_run_id(), name, state, update, elapsed)
    langsmith_trace.calls_of_node(dict(state), dict(update))
    if PHASE_PROGRESS_STREAMED.get():
        usage = add_usage(state.get("usage"), update["usage"])
        get_stream_writer()(phase_progress(name, update, usage, update.get("budget") or state.get("budget"), state.get("observations")))
    crash_point(f"leave:{name}")
    return update
