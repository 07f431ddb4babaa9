"""Concurrency benchmark: N runs started at once in one process (one Runner, its pool of 10).

    BOUNDLOOP_DATABASE_URL=postgresql://... .venv/bin/python -m tests.benchmarks.concurrency [--runs 50 200] [--reps 3]

Prints, per N: errors, runs/s (median and spread over the repetitions), and the load average
before and after; asserts nothing. Each run is a real loop on the scripted model: plan, one
workspace read, the answer, the critic, commit — against one shared workspace MCP server over
streamable HTTP (a stdio server per run would measure process start-ups on this machine, not
boundloop). The Runner drives at most `--active` runs at once (default 64); the others wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from boundloop.checkpoints.pool import database_url
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task

PLAN = {"content": {"steps": [{"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"]}], "blocked": None},
        "usage": {"input_tokens": 100, "output_tokens": 20}}
CRITIC = {"content": {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []},
          "usage": {"input_tokens": 50, "output_tokens": 5}}
READ = {"content": "", "tool_calls": [{"name": "workspace__read_file", "args": {"path": "notes.md"}}], "usage": {"input_tokens": 100, "output_tokens": 10}}
DONE = {"content": "Ana publishes the notes.", "tool_calls": [], "usage": {"input_tokens": 100, "output_tokens": 10}}


def start_workspace_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The shipped workspace server over streamable HTTP on a free port, once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "boundloop.mcp_servers.workspace", "--root", str(root), "--http", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the workspace server did not start within 30 s")


async def one_wave(runner: Runner, settings: RunSettings, runs: int) -> tuple[float, int]:
    started = time.perf_counter()
    results = await asyncio.gather(*(runner.start(Task(goal=f"Summarize notes.md ({n})"), settings) for n in range(runs)),
                                   return_exceptions=True)
    elapsed = time.perf_counter() - started
    errors = [r for r in results if isinstance(r, BaseException) or r.status != Terminal.SUCCESS]
    for error in errors[:3]:
        print(f"    e.g. {error if isinstance(error, BaseException) else error.status}: {str(getattr(error, '__cause__', '') or '')[:200]}")
    return runs / elapsed, len(errors)


async def main(url: str, waves: list[int], reps: int, active: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    script = root.parent / f"{root.name}.script.json"
    script.write_text(json.dumps({"model_id": "bench", "roles": {"planner": [PLAN], "actor": [READ, DONE], "critic": [CRITIC]}}))
    server, mcp_url = start_workspace_server(root)
    servers = {"mcpServers": {"workspace": {"url": mcp_url, "trusted": True, "root": str(root)}}}
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(root), servers=servers)
    try:
        async with Runner(url, max_active_runs=active) as runner:
            await one_wave(runner, settings, 5)  # warm up: imports, schema, the server's first sessions
            print(f"{'runs':>5} {'errors':>7} {'runs/s median':>14} {'min–max':>13}   load average before → after")
            for runs in waves:
                before = os.getloadavg()[0]
                figures = [await one_wave(runner, settings, runs) for _ in range(reps)]
                rates = [rate for rate, _ in figures]
                errors = sum(count for _, count in figures)
                print(f"{runs:>5} {errors:>7} {statistics.median(rates):>14.1f} {min(rates):>6.1f}–{max(rates):<6.1f}   "
                      f"{before:.2f} → {os.getloadavg()[0]:.2f}")
    finally:
        server.terminate()
        server.wait(timeout=15)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--active", type=int, default=64, help="Runner(max_active_runs=...)")
    options = parser.parse_args()
    asyncio.run(main(os.environ.get("BOUNDLOOP_DATABASE_URL") or database_url(), options.runs, options.reps, options.active))
