"""Gateway benchmark: parallel read-only calls, and the gateway's own overhead per call.

    .venv/bin/python -m tests.benchmarks.gateway [--reps 30]

Prints figures; asserts nothing about time (CI never runs this). Everything runs in one process
against the probe MCP server over stdio, so the ratios compare like with like.
  1. 8 independent read-only calls of 200 ms, planned into one wave by the gateway and run
     together, against one such call: the wave should take < 1.5x one call.
  2. One instant `echo` call through the gateway (admit: registry, arguments, policy, budget,
     breakers; dispatch with retry policy; bounding the result) against the same call sent
     straight to the MCP session: the extra milliseconds and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from boundloop.graph import schedule
from boundloop.graph.core.budget import Budget, empty_usage
from boundloop.tools import dispatch, gateway
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry

PROBE = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


async def main(reps: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    servers = load_servers({"mcpServers": {
        "probe": {"command": sys.executable, "args": [str(PROBE)], "trusted": True},
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(root)], "trusted": True},
    }})
    async with MCPBridge(servers) as bridge:
        registry = ToolRegistry(bridge.specs())
        policy = gateway.run_policy({"unattended": True}, "coding_assistant")
        budget = Budget(tool_calls=None, parallel_calls=8)

        async def through_gateway(name: str, args_list: list[dict]) -> float:
            started = time.perf_counter()
            proposed = [gateway.ProposedCall(f"c{i}", f"t{i}", name, args) for i, args in enumerate(args_list)]
            admissions = await gateway.admit_all(proposed, registry=registry, rules=policy, budget=budget, usage=empty_usage(),
                                                 breaker_state={}, now=time.time())
            for wave in schedule.waves([a.call for a in admissions if a.verdict == "admit"], budget.parallel_calls):
                outcomes = await asyncio.gather(*(
                    dispatch.call_with_retry(bridge, registry.get(call["name"]), call["args"], timeout_s=10, max_attempts=3)
                    for call in wave
                ))
                for outcome in outcomes:
                    assert outcome.ok, outcome
                    dispatch.bound_text(outcome.text, 4_000)
            return time.perf_counter() - started

        slow = [{"seconds": 0.2}]
        one = statistics.median([await through_gateway("probe__slow", slow) for _ in range(5)])
        eight = statistics.median([await through_gateway("probe__slow", slow * 8) for _ in range(5)])
        print(f"parallel reads: one 200 ms call {one * 1000:.1f} ms; 8 calls in one wave {eight * 1000:.1f} ms; "
              f"ratio {eight / one:.2f}x (target < 1.5x)")

        async def direct() -> float:
            started = time.perf_counter()
            outcome = await bridge.call("probe", "echo", {"text": "hi"}, timeout_s=10)
            assert outcome.ok
            return time.perf_counter() - started

        for _ in range(5):  # warm up both paths
            await direct()
            await through_gateway("probe__echo", [{"text": "hi"}])
        pairs = [(await direct(), await through_gateway("probe__echo", [{"text": "hi"}])) for _ in range(reps)]
        direct_ms = statistics.median(d for d, _ in pairs) * 1000
        gated_ms = statistics.median(g for _, g in pairs) * 1000
        ratio = statistics.median(g / d for d, g in pairs)
        admit_only = _admit_cost(registry, policy, budget, gateway.ProposedCall("c", "t", "probe__echo", {"text": "hi"}))
        with_path = _admit_cost(registry, policy, budget, gateway.ProposedCall("c", "t", "workspace__read_file", {"path": "src/a.py"}))
        print(f"per call: direct MCP session {direct_ms:.3f} ms; through the gateway {gated_ms:.3f} ms; "
              f"overhead {gated_ms - direct_ms:.3f} ms; ratio {ratio:.3f}x (median of {reps} paired runs)")
        print(f"gate decision alone (registry, arguments, policy, budget, breakers): {admit_only * 1e6:.1f} µs per call")
        print(f"gate decision with one path resolved (workspace read_file under coding_assistant): {with_path * 1e6:.1f} µs per call")


def _admit_cost(registry: ToolRegistry, policy, budget: Budget, call: gateway.ProposedCall, n: int = 2000) -> float:
    started = time.perf_counter()
    for _ in range(n):
        gateway.admit(call, registry=registry, rules=policy, budget=budget, usage=empty_usage(), breaker_state={}, now=0.0)
    return (time.perf_counter() - started) / n


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    asyncio.run(main(parser.parse_args().reps))
