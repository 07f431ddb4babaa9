"""Fixtures for the worker pool: `boundloop worker` processes, one shared workspace MCP server
over HTTP, and scripted runs whose side effects are files written through it."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from boundloop.graph.run import workers
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, step
from tests.mcp_servers.launch import http

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
PROCESS_TIMEOUT_S = 120
MID_RUN = """
SELECT pickup.thread_id FROM boundloop_run_pickups pickup JOIN procrastinate_jobs job ON job.id = pickup.job_id
WHERE pickup.worker LIKE %s AND job.status = 'doing'
  AND (SELECT count(*) FROM boundloop_ledger entry WHERE entry.thread_id = pickup.thread_id AND entry.status = 'COMPLETE') BETWEEN 1 AND 2"""
"""Runs the worker drives right now that made some of their three writes, not all."""
ENDED = "SELECT status FROM boundloop_runs WHERE thread_id = %s AND status <> 'running'"
"""A run's terminal status once it has one."""


def env() -> dict[str, str]:
    """The caller's environment without any database or model settings: the command line names them."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL", "BOUNDLOOP_CRASH"))}


def boundloop(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BOUNDLOOP, *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, env=env(), cwd=cwd, stdin=subprocess.DEVNULL)


def writes(name: str) -> list[dict[str, Any]]:
    """The side effects of run `name`, in order. The second overwrites the first, so a first write
    sent again after it would show in the file."""
    return [
        {"name": "workspace__write_file", "args": {"path": f"{name}/report.md", "content": f"draft {name}\n"}},
        {"name": "workspace__write_file", "args": {"path": f"{name}/report.md", "content": f"final {name}\n"}},
        {"name": "workspace__write_file", "args": {"path": f"{name}/done.md", "content": f"done {name}\n"}},
    ]


def roles(name: str, *, extra: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """A scripted run that writes `writes(name)` one call per turn, then the `extra` calls, then answers."""
    calls = [*writes(name), *extra]
    plan = {"content": {"steps": [{"id": "write", "description": f"Write {name}'s report",
                                   "tools": sorted({call["name"] for call in calls})}], "blocked": None},
            "usage": {"input_tokens": 200, "output_tokens": 40}}
    return {"planner": [plan], "actor": [*(step(calls=[call]) for call in calls), step(f"{name}/report.md is final")], "critic": [CRITIC_PASS]}


@dataclass(frozen=True)
class Pool:
    """A database, a workspace served over HTTP by one MCP server, and files to submit runs with."""

    db_url: str
    workspace: Path
    journal: Path
    home: Path
    servers: Path

    def script(self, name: str, **options: Any) -> Path:
        path = self.home / f"{name}.script.json"
        path.write_text(json.dumps({"model_id": "scripted-workers", "roles": roles(name, **options)}))
        return path

    def submit(self, name: str, **options: Any) -> str:
        """`boundloop submit` one run named `name` (its thread id); returns the run id."""
        result = boundloop("submit", "--goal", f"Write {name}'s report in {name}/", "--model", "scripted", "--script", str(self.script(name, **options)),
                           "--servers", str(self.servers), "--budget", "side_effects=10", "--thread", name, "--json", "--database-url", self.db_url)
        assert result.returncode == 0, result.stderr
        [queued] = json.loads(result.stdout)
        return queued["run_id"]

    async def queue(self, runner: Any, names: list[str]) -> None:
        """Queue one run per name in-process (`workers.submit`), each with its own script, in order."""
        servers = json.loads(self.servers.read_text())
        async with workers.opened_queue(runner.pool) as queue:
            for name in names:
                settings = RunSettings(model="scripted", script=str(self.script(name)), servers=servers)
                await workers.submit(queue, runner, name, Task(goal=f"Write {name}'s report in {name}/", budget={"side_effects": 10}), settings)

    def files(self, name: str) -> dict[str, str]:
        root = self.workspace / name
        return {path.name: path.read_text() for path in sorted(root.iterdir())} if root.exists() else {}

    def ledger(self, name: str) -> list[tuple[str, str]]:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            return [tuple(row) for row in conn.execute(
                "SELECT call_id, status FROM boundloop_ledger WHERE thread_id = %s ORDER BY call_id", (name,))]

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            try:
                return [tuple(row) for row in conn.execute(sql, params)]
            except psycopg.errors.UndefinedTable:  # nothing created the tables yet
                return []


@pytest.fixture
def worker_pool(db_url: str, tmp_path: Path) -> Iterator[Pool]:
    workspace, journal = tmp_path / "workspace", tmp_path / "journal"
    workspace.mkdir()
    with http("workspace", "--root", str(workspace), "--journal-dir", str(journal)) as url:
        servers = tmp_path / "servers.json"
        # A server reached by URL declares its root, so path rules can resolve what its calls reach.
        servers.write_text(json.dumps({"mcpServers": {"workspace": {"url": url, "trusted": True, "root": str(workspace)}}}))
        yield Pool(db_url, workspace, journal, tmp_path, servers)


@pytest.fixture
def start_worker(worker_pool: Pool, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """`start_worker(name, concurrency=4)`: a `boundloop worker` process, logging to tmp_path/NAME.log;
    stopped (SIGTERM, then SIGKILL) and reaped after the test."""
    started: list[subprocess.Popen] = []

    def start(name: str, *, concurrency: int = 4) -> subprocess.Popen:
        log = (tmp_path / f"{name}.log").open("w")
        process = subprocess.Popen([BOUNDLOOP, "worker", "--concurrency", str(concurrency), "--name", name, "--database-url", worker_pool.db_url],
                                   env=env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        log.close()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_until(what: str, check: Callable[[], Any], *, within_s: float, every_s: float = 0.1) -> Any:
    """Poll `check` until it returns something true; return that. Fails naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {within_s:.0f}s")


async def eventually(what: str, check: Callable[[], Any], *, within_s: float, every_s: float = 0.1) -> Any:
    """`wait_until` inside a test's event loop: `check` may return an awaitable."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        await asyncio.sleep(every_s)
    raise AssertionError(f"{what}: not within {within_s:.0f}s")
