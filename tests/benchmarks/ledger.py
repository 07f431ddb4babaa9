"""Ledger benchmark: what exactly-once costs per side-effecting call, and how fast a run resumes.

    BOUNDLOOP_DATABASE_URL=postgresql://... .venv/bin/python -m tests.benchmarks.ledger [--reps 50]

Prints figures; asserts nothing about time (CI never runs this). Uses the database named by
BOUNDLOOP_DATABASE_URL (or the embedded cluster) and a scratch workspace.
  1. A workspace write_file sent straight through the MCP bridge, against the same write through
     the ledger (INTENT before, COMPLETE after): the extra milliseconds per call.
  2. Resume latency: a run is SIGKILLed as its second actor turn starts; `boundloop resume` is
     spawned, and the time from the spawn to the first node it runs (its first trace event) is
     measured, as well as the time to the end of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from boundloop.checkpoints import open_pool
from boundloop.checkpoints.pool import database_url
from boundloop.checkpoints.schema import migrate
from boundloop.tools import ledger
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")


async def ledger_cost(url: str, reps: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    servers = load_servers({"mcpServers": {"workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(root)], "trusted": True}}})
    pool = await open_pool(url)
    await migrate(pool)
    async with MCPBridge(servers) as bridge:
        spec = ToolRegistry(bridge.specs()).get("workspace__write_file")
        run = f"bench-{uuid.uuid4().hex[:8]}"

        async def direct(n: int) -> float:
            started = time.perf_counter()
            assert (await bridge.call("workspace", "write_file", {"path": f"d{n}.txt", "content": "x"}, timeout_s=10)).ok
            return time.perf_counter() - started

        async def through_ledger(n: int) -> float:
            call = {"call_id": f"a{n}.0", "name": "workspace__write_file", "args": {"path": f"l{n}.txt", "content": "x"}, "args_hash": f"h{n}"}
            key = ledger.idempotency_key(run, None, call["call_id"], call["args_hash"])
            started = time.perf_counter()
            outcome = await ledger.run_once(pool, key=key, run_id=run, call=call, spec=spec, step_id=None,
                                            send=lambda arguments: bridge.call("workspace", "write_file", arguments, timeout_s=10))
            assert outcome.ok
            return time.perf_counter() - started

        for n in range(5):
            await direct(-n - 1), await through_ledger(-n - 1)
        pairs = [(await direct(n), await through_ledger(n)) for n in range(reps)]
    await pool.close()
    plain = statistics.median(d for d, _ in pairs) * 1000
    guarded = statistics.median(g for _, g in pairs) * 1000
    extra = statistics.median((g - d) for d, g in pairs) * 1000
    print(f"side-effecting call: direct {plain:.3f} ms; through the ledger {guarded:.3f} ms; "
          f"ledger cost {extra:.3f} ms per call (median of {reps} paired calls; INTENT + COMPLETE, fsync as configured)")


def resume_latency(url: str, reps: int) -> None:
    from tests.graph.test_cli import _crash_task, _env, _run_args  # the same scripted task the kill tests use

    import psycopg

    starts, ends = [], []
    for n in range(reps):
        tmp = Path(tempfile.mkdtemp(prefix="bench-resume-"))
        _, servers, script = _crash_task(tmp, "r", slow_s=0.0)
        thread = f"bench-resume-{uuid.uuid4().hex[:8]}"
        subprocess.run([BOUNDLOOP, *_run_args(servers, script, thread, url)], env=_env(BOUNDLOOP_CRASH_AT="enter:act#2"),
                       capture_output=True, timeout=120)
        spawned = time.time()
        subprocess.run([BOUNDLOOP, "resume", thread, "--json", "--database-url", url], env=_env(), capture_output=True, timeout=120, check=True)
        finished = time.time()
        with psycopg.connect(url) as conn:
            first = conn.execute("SELECT extract(epoch FROM at) FROM boundloop_trace WHERE thread_id = %s AND at > to_timestamp(%s) ORDER BY id LIMIT 1",
                                 (thread, spawned)).fetchone()[0]
        starts.append(float(first) - spawned)
        ends.append(finished - spawned)
    print(f"resume: process start → first node finished {statistics.median(starts) * 1000:.0f} ms "
          f"(min {min(starts) * 1000:.0f}, max {max(starts) * 1000:.0f}); → run ended {statistics.median(ends) * 1000:.0f} ms (median of {reps})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--resumes", type=int, default=5)
    options = parser.parse_args()
    url = database_url()
    asyncio.run(ledger_cost(url, options.reps))
    resume_latency(url, options.resumes)
