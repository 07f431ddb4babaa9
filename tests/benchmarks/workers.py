"""Worker-pool benchmark: runs per second with 1, 2 and 4 `boundloop worker` processes on one PostgreSQL.

    .venv/bin/python -m tests.benchmarks.workers [--runs 24] [--reps 3] [--workers 1,2,4] [--concurrency 4]

Prints figures; asserts nothing about time (CI never runs this). Starts its own throwaway
PostgreSQL cluster and one workspace MCP server over HTTP that every run writes through. For each
worker count it starts the workers, waits until all of them are registered with the queue, then
per repetition submits a batch of scripted runs (three keyed file writes each, the kill test's
runs) and times the batch from the first submission to the last run's job succeeding. Worker
start-up is outside the timing. Prints the median and the spread over repetitions, the CPU time
spent per run in the workers and in PostgreSQL plus the MCP server (what bounds throughput: the
cores divided by the CPU a run costs, and a worker is one Python process, one core at most), and
the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from boundloop.checkpoints import LocalCluster
from boundloop.graph.run import workers
from boundloop.graph.run.runner import Runner
from boundloop.graph.task import RunSettings, Task
from tests.mcp_servers.launch import http
from tests.workers.conftest import roles

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")


async def prepare(url: str) -> None:
    """Create every table first, so the workers starting together do not queue on the schema lock."""
    async with Runner(url) as runner, workers.opened_queue(runner.pool):
        pass


async def batch(url: str, home: Path, servers: dict, label: str, runs: int) -> float:
    """Submit `runs` runs and wait for all of them; the seconds it took."""
    async with Runner(url) as runner, workers.opened_queue(runner.pool) as queue:
        started = time.perf_counter()
        for index in range(runs):
            name = f"{label}-{index:03d}"
            script = home / f"{name}.json"
            script.write_text(json.dumps({"model_id": "scripted-bench", "roles": roles(name)}))
            settings = RunSettings(model="scripted", script=str(script), servers=servers)
            await workers.submit(queue, runner, name, Task(goal=f"Write {name}'s report", budget={"side_effects": 10}), settings)
        async with runner.pool.connection() as conn:
            while True:
                row = await (await conn.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed')) AS done, count(*) FILTER (WHERE status = 'failed') AS failed"
                    " FROM procrastinate_jobs WHERE task_name = %s AND lock LIKE %s", (workers.START_RUN, f"run:{label}-%"))).fetchone()
                if row["done"] == runs:
                    break
                await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        assert row["failed"] == 0, f"{row['failed']} runs of {label} failed; see the worker logs in {home}"
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process and its reaped children have used so far (0 once it ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # it ended since it was listed
        return 0.0
    return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def helpers_cpu(pgdata: Path) -> float:
    """CPU seconds used so far by PostgreSQL (its postmaster, live backends and, through the
    postmaster, ended ones) and the workspace MCP server: the rest of each run's cost."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    servers = [pid for pid in children(os.getpid()) if "boundloop.mcp_servers.workspace" in Path(f"/proc/{pid}/cmdline").read_text()]
    return sum(cpu_seconds(pid) for pid in [postmaster, *children(postmaster), *servers])


def measure(admin_url: str, pgdata: Path, home: Path, servers: dict, count: int, options: argparse.Namespace) -> tuple[list[float], float, float]:
    """Runs per second of each batch, and CPU seconds per run: in the workers, in PostgreSQL and the MCP server."""
    database = f"bench_w{count}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    url = admin_url.rsplit("/", 1)[0] + f"/{database}"
    asyncio.run(prepare(url))
    processes = []
    try:
        for index in range(count):
            log = (home / f"w{count}-{index}.log").open("w")
            processes.append(subprocess.Popen([BOUNDLOOP, "worker", "--concurrency", str(options.concurrency), "--name", f"w{index}",
                                               "--database-url", url], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        with psycopg.connect(url, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0] < count:
                time.sleep(0.1)
        booted, helped = sum(cpu_seconds(process.pid) for process in processes), helpers_cpu(pgdata)
        rates = [options.runs / asyncio.run(batch(url, home, servers, f"b{count}-{rep}", options.runs)) for rep in range(options.reps)]
        runs = options.runs * options.reps
        worker_cpu = sum(cpu_seconds(process.pid) for process in processes) - booted
        return rates, worker_cpu / runs, (helpers_cpu(pgdata) - helped) / runs
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=24, help="runs per batch")
    parser.add_argument("--reps", type=int, default=3, help="batches per worker count")
    parser.add_argument("--workers", default="1,2,4", help="worker counts to measure")
    parser.add_argument("--concurrency", type=int, default=4, help="runs each worker drives at once")
    options = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    base.chmod(0o755)  # as root, the cluster's unprivileged user must traverse it
    cluster = LocalCluster(base / "pgdata", durable=False)
    try:
        cluster.ensure_running()
        workspace = base / "workspace"
        with http("workspace", "--root", str(workspace), "--journal-dir", str(base / "journal")) as mcp_url:
            servers = {"mcpServers": {"workspace": {"url": mcp_url, "trusted": True, "root": str(workspace)}}}
            print(f"{options.runs} runs per batch, {options.reps} batches, concurrency {options.concurrency} per worker, {os.cpu_count()} CPUs", flush=True)
            for count in (int(part) for part in options.workers.split(",")):
                rates, worker_cpu, helper_cpu = measure(cluster.url("postgres"), base / "pgdata", base, servers, count, options)
                ceiling = (os.cpu_count() or 1) / (worker_cpu + helper_cpu)
                print(f"{count} worker(s): {statistics.median(rates):.2f} runs/s (min {min(rates):.2f}, max {max(rates):.2f}); "
                      f"CPU per run {worker_cpu * 1000:.0f} ms in the workers + {helper_cpu * 1000:.0f} ms in PostgreSQL and the MCP server "
                      f"(all cores free: at most {ceiling:.1f} runs/s); load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
