"""Start-up benchmark: from a new process to the first model request, the first tool call and the exit.

    .venv/bin/pip install -e '.[bench]'                 # the peer (langchain), once
    .venv/bin/python -m tests.benchmarks.startup [--reps 5] [--latency-ms 300]

One short task (read notes.md, answer) run from a fresh process, as a user's command runs it:
boundloop through its CLI (`boundloop run ... --unattended --json`), LangChain's create_agent
through a script that does the same job (tests/benchmarks/startup_peer.py). Both talk to one
local OpenAI-compatible server (tests/graph/fake_openai.py) that answers each request after
`--latency-ms` and notes when it arrived, and to the shipped workspace MCP server behind a
pass-through that notes when the first tool call arrived (tests/benchmarks/stamp_calls.py); both
checkpoint in the same Postgres. Every time is counted from the process's spawn.

Two cases, alternating in each repetition: the first run in a new workspace, and a later run in a
workspace each system has run in before (boundloop then pins the tool listing kept from that earlier
run and sends its first model request while the server starts: tools/kept_listing.py). Per case and
system: time to the first model request, to the first tool call, and to the exit; the median over
the repetitions with its min–max, the ratios taken within each repetition, and boundloop's intake
step (its trace: starting and listing the tool servers, less what they did while the runner
opened; with a kept listing, reading it).
The load average is printed. Asserts nothing. Database: BOUNDLOOP_DATABASE_URL, else the
embedded cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from boundloop.checkpoints import store
from boundloop.checkpoints.pool import database_url, open_pool
from tests.graph.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
BOUNDLOOP = Path(sys.executable).with_name("boundloop")
NOTES = "Action items:\n- Ana: publish the notes\n"


@dataclass
class Times:
    """Seconds from the spawn of one run's process."""

    first_model: float
    first_tool: float
    exit: float
    intake: float | None = None


def servers_file(directory: Path, workspace: Path, stamp: Path) -> Path:
    """The shipped workspace server, behind the pass-through that stamps the first tool call."""
    server = [sys.executable, "-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)]
    entry = {"command": sys.executable, "args": [str(ROOT / "tests/benchmarks/stamp_calls.py"), str(stamp), "--", *server],
             "trusted": True, "protocol": "auto"}
    path = directory / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"workspace": entry}}))
    return path


def command(system: str, fake: FakeOpenAI, database: str, servers: Path, workspace: Path) -> list[str]:
    if system == "boundloop":
        return [str(BOUNDLOOP), "run", "Summarize notes.md", "--workspace", str(workspace), "--servers", str(servers),
                "--model", "bench-startup", "--base-url", fake.base_url, "--budget", "cost_usd=none", "--unattended", "--json",
                "--database-url", database]
    return [sys.executable, "-m", "tests.benchmarks.startup_peer", fake.base_url, database, str(servers), str(workspace)]


def run_once(system: str, database: str, latency_s: float, directory: Path | None = None) -> Times:
    """One run in `directory` (its workspace and servers file; kept between runs given the same one),
    else in a new temporary directory."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            return run_once(system, database, latency_s, Path(tmp))
    workspace = directory / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.md").write_text(NOTES)
    stamp = directory / "first-tool-call"
    stamp.unlink(missing_ok=True)
    with FakeOpenAI(delay_s=latency_s) as fake:
        argv = command(system, fake, database, servers_file(directory, workspace, stamp), workspace)
        spawned = time.time()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-bench-startup"})
        ended = time.time()
    if done.returncode != 0 or not stamp.exists() or not fake.arrived:
        raise SystemExit(f"{system} run failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    times = Times(fake.arrived[0] - spawned, float(stamp.read_text()) - spawned, ended - spawned)
    if system == "boundloop":
        times.intake = asyncio.run(intake_s(database, json.loads(done.stdout)["run_id"]))
    return times


async def intake_s(database: str, run_id: str) -> float:
    """How long the run's intake step took, from its trace."""
    async with await open_pool(database) as pool:
        events = await store.read_trace(pool, run_id)
    return next(float(event.data["budget"]["time_s"]) for event in events if event.node == "intake")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=300)
    args = parser.parse_args()
    database = os.environ.get("BOUNDLOOP_DATABASE_URL") or database_url()
    systems = ("boundloop", "create_agent")
    first: dict[str, list[Times]] = {system: [] for system in systems}
    later: dict[str, list[Times]] = {system: [] for system in systems}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        kept = {system: Path(tmp) / system for system in systems}
        for directory in kept.values():
            directory.mkdir()
        for system in systems:  # an unmeasured first run in each system's own workspace
            run_once(system, database, args.latency_ms / 1000, kept[system])
        for _ in range(args.reps):
            for system in systems:
                first[system].append(run_once(system, database, args.latency_ms / 1000))
                later[system].append(run_once(system, database, args.latency_ms / 1000, kept[system]))
    print(f"start-up from a new process, {args.reps} repetitions, model latency {args.latency_ms:g} ms; "
          f"load average {os.getloadavg()[0]:.2f}")
    for title, results in (("the first run in a workspace", first), ("a later run in the same workspace", later)):
        print(f"\n{title}")
        print(f"{'seconds from spawn':24} {'boundloop':>20} {'create_agent':>20} {'ratio':>20}")
        for field in ("first_model", "first_tool", "exit"):
            ours = [getattr(t, field) for t in results["boundloop"]]
            peer = [getattr(t, field) for t in results["create_agent"]]
            ratios = [a / b for a, b in zip(ours, peer)]
            print(f"{field.replace('_', ' '):24} {spread(ours):>20} {spread(peer):>20} {spread(ratios):>20}")
        intake = [t.intake for t in results["boundloop"] if t.intake is not None]
        print(f"boundloop's intake step: {spread(intake)} s")

if __name__ == "__main__":
    main()
