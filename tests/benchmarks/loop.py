"""Loop benchmark: the cost of one boundloop iteration against a minimal LangGraph loop.

    BOUNDLOOP_DATABASE_URL=postgresql://... .venv/bin/python -m tests.benchmarks.loop [--reps 3]

One iteration = one model turn + one read-only tool call (workspace read_file over stdio), with a
zero-latency scripted model; both loops use the same Postgres saver and the same MCP session
kind, in this process. The baseline is the smallest honest LangGraph loop: a model node and a
tool node, messages in state, nothing else. boundloop adds per iteration: the gate (registry,
arguments, policy, budget, breakers), the observation ladder, budget accounting and trace events,
all in the same two steps (act with its gate and the grounding of the previous turn's results, then
execute), each a checkpoint write with durability="sync".
Marginal ms per iteration = (T(60) − T(20)) / 40, which removes each run's fixed cost (planning,
verification, server start). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from boundloop.checkpoints.pool import database_url
from boundloop.checkpoints.saver import postgres_saver
from boundloop.graph.run.runner import Runner
from boundloop.graph.task import RunSettings, Task
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers

def read(n: int) -> dict[str, Any]:
    """Each read differs (max_chars) so the repeated-call breaker, rightly, does not step in."""
    return {"path": "notes.md", "max_chars": 1000 + n}


def write_script(path: Path, iterations: int, *, finish: bool = True) -> None:
    """`iterations` reads, then the answer (unless not `finish`: the run then stops on ScriptExhausted)."""
    roles = {
        "planner": [{"content": {"steps": [{"id": "s1", "description": "read", "tools": ["workspace__read_file"]}]}}],
        "actor": [{"tool_calls": [{"name": "workspace__read_file", "args": read(n)}]} for n in range(iterations)] + ([{"content": "done"}] if finish else []),
        "critic": [{"content": {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}}}],
    }
    path.write_text(json.dumps({"model_id": "bench", "roles": roles}))


def boundloop_settings(root: Path, script: Path, context_tokens: int | None = None) -> tuple[Task, RunSettings]:
    """No budget bounds the run, and its context only when `context_tokens` is given (compaction
    then keeps each actor request under its threshold)."""
    budget: dict[str, float | int | None] = dict.fromkeys(["model_turns", "tool_calls", "input_tokens", "output_tokens", "wall_clock_s", "tool_result_chars"])
    if context_tokens is not None:
        budget["context_tokens"] = context_tokens
    task = Task(goal="read the notes", budget=budget)
    return task, RunSettings(model="scripted", script=str(script), workspace_root=str(root), unattended=True)


async def boundloop_run(runner: Runner, root: Path, iterations: int, thread_id: str | None = None, context_tokens: int | None = None) -> float:
    script = root / f"script-{iterations}.json"
    write_script(script, iterations)
    task, settings = boundloop_settings(root, script, context_tokens)
    started = time.perf_counter()
    report = await runner.start(task, settings, thread_id=thread_id)
    elapsed = time.perf_counter() - started
    assert report.status == "SUCCESS", report.values.get("ending")
    return elapsed


class MinimalState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def minimal_graph(bridge: MCPBridge, iterations: int, saver: Any) -> Any:
    async def model(state: MinimalState) -> dict[str, Any]:
        turns = sum(isinstance(message, AIMessage) for message in state["messages"])
        if turns >= iterations:
            return {"messages": [AIMessage("done")]}
        return {"messages": [AIMessage("", tool_calls=[{"name": "read_file", "args": read(turns), "id": f"c{turns}"}])]}

    async def tool(state: MinimalState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        outcome = await bridge.call("workspace", "read_file", call["args"], timeout_s=10)
        return {"messages": [ToolMessage(outcome.text, tool_call_id=call["id"])]}

    builder = StateGraph(MinimalState)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda state: "tool" if state["messages"][-1].tool_calls else END, ["tool", END])
    builder.add_edge("tool", "model")
    return builder.compile(checkpointer=saver)


async def minimal_run(bridge: MCPBridge, saver: Any, iterations: int, n: int) -> float:
    graph = minimal_graph(bridge, iterations, saver)
    config = {"configurable": {"thread_id": f"minimal-{iterations}-{n}-{time.time_ns()}"}, "recursion_limit": 10_000}
    started = time.perf_counter()
    await graph.ainvoke({"messages": [("user", "read the notes")]}, config, durability="sync")
    return time.perf_counter() - started


async def main(reps: int) -> None:
    url = database_url()
    root = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    servers = load_servers({"mcpServers": {"workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(root)], "trusted": True}}})
    ours: dict[int, list[float]] = {20: [], 60: []}
    base: dict[int, list[float]] = {20: [], 60: []}
    async with Runner(url) as runner, postgres_saver(runner.pool) as saver, MCPBridge(servers) as bridge:
        await boundloop_run(runner, root, 2), await minimal_run(bridge, saver, 2, -1)  # warm up
        for n in range(reps):
            for iterations in (20, 60):
                ours[iterations].append(await boundloop_run(runner, root, iterations))
                base[iterations].append(await minimal_run(bridge, saver, iterations, n))
    marginal_ours = (statistics.median(ours[60]) - statistics.median(ours[20])) / 40 * 1000
    marginal_base = (statistics.median(base[60]) - statistics.median(base[20])) / 40 * 1000
    print(f"per iteration (model turn + read-only MCP call, Postgres, durability=sync): boundloop {marginal_ours:.2f} ms; "
          f"minimal LangGraph loop {marginal_base:.2f} ms; ratio {marginal_ours / marginal_base:.2f}x (median of {reps})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    asyncio.run(main(parser.parse_args().reps))
