"""Peer benchmark: boundloop against LangChain's create_agent, bare and with its three middlewares.

    .venv/bin/pip install -e '.[bench]'                 # the peer (langchain), once
    .venv/bin/python -m tests.benchmarks.peer iterations   # wall/CPU ms, rows, round trips per iteration
    .venv/bin/python -m tests.benchmarks.peer storage      # checkpoint tables at 50/200/1000 iterations
    .venv/bin/python -m tests.benchmarks.peer concurrency  # 50 and 200 runs at once, runs/s
    .venv/bin/python -m tests.benchmarks.peer concurrency --runs 50 --run-iterations 20  # the same, runs of 20 iterations
    .venv/bin/python -m tests.benchmarks.peer resume       # process start -> first step saved
    .venv/bin/python -m tests.benchmarks.peer table        # all four, then the markdown table of tests/README.md
    .venv/bin/python -m tests.benchmarks.peer soak         # 1,000 iterations: time flat, storage linear (--system bare: the peer's; --reps N: N runs;
                                                           #   --context-tokens N: boundloop's context budget, compaction bounds each request)
    .venv/bin/python -m tests.benchmarks.peer read         # ms to read a thread's state after 200 and 1,000 iterations
    ... --list-every-call                                  # any command: every call checked against a new tools/list, as for an untrusted server

Same process, same Postgres saver, same MCP `read_file` of our workspace server (stdio), scripted
zero-latency models, durability "sync". One iteration = one model turn + one read call. Figures
never depend on node names: rows come from the saver's tables (per thread), round trips from
psycopg (each wait on the server's socket counts one:
a round trip, or one part of a pipelined batch), listings from the MCP client, iteration times
from the MCP calls. The workspace server is trusted and says how long its tool list stands, so
boundloop checks its reads against a listing that still stands (tools/README.md, Pinned tools);
`--list-every-call` measures what a server without that promise costs.
Each figure is the median over the repetitions with its min–max, ratios are taken within each
repetition; the load average is printed. Asserts nothing. Database: BOUNDLOOP_DATABASE_URL, else
the embedded cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.language_models.chat_models import BaseChatModel
from mcp import Client
from psycopg.rows import tuple_row

from boundloop.checkpoints.pool import database_url
from boundloop.checkpoints.saver import postgres_saver
from boundloop.graph.core.errors import RunStopped
from boundloop.graph.run.runner import Runner
from boundloop.graph.services import default_servers
from tests.benchmarks.loop import boundloop_run, boundloop_settings, write_script
from tests.benchmarks.peer_agent import PEERS, PROMPT, peer_agent, peer_config
from boundloop.tools import fresh_listing
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers

SYSTEMS = ("boundloop", *PEERS)
REPETITIONS = 5
SETTLING = 10
"""Iterations at the start of a run left out of its in-run time per iteration (`in_run`)."""
SOAK_RUNS = 3
"""A soak's last/first ratio moves by a third between runs on this machine: one run proves little."""
THREAD_ROWS = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s),
       (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(t)s),
       (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(t)s),
       (SELECT coalesce(sum(octet_length(checkpoint::text) + octet_length(metadata::text)), 0) FROM checkpoints WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %(t)s)
"""
GRAPH_STEPS = "SELECT count(*) FROM checkpoints WHERE thread_id = ANY(%s) AND (metadata->>'step')::int >= 1"


def spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def load() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts every wait of a psycopg connection (sync or async) for the server: one round trip."""
    count = [0]
    originals = psycopg.AsyncConnection.wait, psycopg.Connection.wait

    async def async_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await originals[0](self, *args, **kwargs)

    def sync_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return originals[1](self, *args, **kwargs)

    psycopg.AsyncConnection.wait, psycopg.Connection.wait = async_wait, sync_wait  # type: ignore[method-assign]
    try:
        yield count
    finally:
        psycopg.AsyncConnection.wait, psycopg.Connection.wait = originals  # type: ignore[method-assign]


@contextmanager
def noting(owner: Any, method: str, note: Callable[[], None]) -> Iterator[None]:
    """While the context lasts, `owner.method` (an async method) calls `note()` before each call."""
    original = getattr(owner, method)

    async def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        note()
        return await original(self, *args, **kwargs)

    setattr(owner, method, noted)
    try:
        yield
    finally:
        setattr(owner, method, original)


@contextmanager
def tool_listings() -> Iterator[list[int]]:
    """Counts every `tools/list` request of any MCP client (a page counts one)."""
    count = [0]
    with noting(Client, "list_tools", lambda: count.__setitem__(0, count[0] + 1)):
        yield count


@contextmanager
def call_times(clock: Callable[[], float] = time.perf_counter) -> Iterator[list[float]]:
    """`clock` at each MCP tool call of any bridge: one per iteration in this benchmark."""
    stamps: list[float] = []
    with noting(MCPBridge, "call", lambda: stamps.append(clock())):
        yield stamps


@contextmanager
def model_requests() -> Iterator[list[tuple[float, float]]]:
    """(start, seconds) of every chat model request of either system: `BaseChatModel.ainvoke`, which
    converts the whole conversation for the request (LangChain's work) and runs the scripted model."""
    spans: list[tuple[float, float]] = []
    original = BaseChatModel.ainvoke

    async def ainvoke(self: BaseChatModel, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            spans.append((started, time.perf_counter() - started))

    BaseChatModel.ainvoke = ainvoke  # type: ignore[method-assign]
    try:
        yield spans
    finally:
        BaseChatModel.ainvoke = original  # type: ignore[method-assign]


def model_share(stamps: list[float], spans: list[tuple[float, float]]) -> list[float]:
    """Per iteration (from one MCP call to the next): ms of the model requests that began in it."""
    shares, spans = [], sorted(spans)
    position = 0
    for begin, end in zip(stamps, stamps[1:]):
        while position < len(spans) and spans[position][0] < begin:
            position += 1
        taken = 0.0
        while position < len(spans) and spans[position][0] < end:
            taken += spans[position][1]
            position += 1
        shares.append(taken * 1000)
    return shares


@dataclass
class Bench:
    url: str
    root: Path
    runner: Runner
    saver: Any
    bridge: MCPBridge
    graphs: dict[tuple[str, int], Any] = field(default_factory=dict)

    async def run(self, system: str, iterations: int, thread_id: str | None = None, context_tokens: int | None = None) -> tuple[float, float]:
        """One run of `iterations`; (wall s, CPU s of this process). `context_tokens`: boundloop's
        context budget (the peers have no such bound)."""
        thread_id = thread_id or f"bench-{system}-{uuid.uuid4().hex[:10]}"
        cpu = time.process_time()
        if system == "boundloop":
            wall = await boundloop_run(self.runner, self.root, iterations, thread_id, context_tokens)
        else:
            assert context_tokens is None, "only boundloop's context has a budget"
            graph = self.graphs.get((system, iterations))
            if graph is None:
                graph = self.graphs[(system, iterations)] = peer_agent(system, self.bridge, self.saver, iterations)
            started = time.perf_counter()
            await graph.ainvoke(PROMPT, peer_config(thread_id), durability="sync")
            wall = time.perf_counter() - started
        return wall, time.process_time() - cpu

    async def rows(self, thread_id: str) -> tuple[int, int, int, int]:
        """(checkpoints, write rows, blob rows, payload bytes) of one thread."""
        async with self.runner.pool.connection() as conn:
            row = await (await conn.cursor(row_factory=tuple_row).execute(THREAD_ROWS, {"t": thread_id})).fetchone()
        assert row is not None
        return row[0], row[1], row[2], row[3]

    async def graph_steps(self, thread_ids: list[str]) -> int:
        """The graph steps the threads took: checkpoints after step 0 (-1 holds the input, 0 START's routing)."""
        async with self.runner.pool.connection() as conn:
            row = await (await conn.cursor(row_factory=tuple_row).execute(GRAPH_STEPS, (thread_ids,))).fetchone()
        assert row is not None
        return int(row[0])


async def open_bench(stack: AsyncExitStack, url: str, *, warm_up: bool = True) -> Bench:
    root = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    runner = await stack.enter_async_context(Runner(url, max_active_runs=256))
    saver = await stack.enter_async_context(postgres_saver(runner.pool))
    bridge = await stack.enter_async_context(MCPBridge(load_servers(default_servers(str(root)))))
    bench = Bench(url, root, runner, saver, bridge)
    for system in SYSTEMS if warm_up else ():  # imports, the shared workspace server, first plans
        await bench.run(system, 2)
    return bench


async def iterations(bench: Bench, reps: int, small: int = 20, large: int = 60) -> dict[str, Any]:
    """Marginal wall and CPU ms per iteration ((T(large) - T(small)) / (large - small)); in-run wall
    ms per iteration (`in_run`, from the large run alone); and rows, psycopg waits and tool listings
    per iteration (the marginal difference, from the last repetition). Every system's runs count
    their waits and time their calls, so what the counting costs is shared."""
    print(f"\n## per iteration (marginal between {small} and {large} iterations; {reps} repetitions; load before {load()})")
    wall: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    cpu: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    in_run_wall: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    counts: dict[str, list[float]] = {}
    for rep in range(reps):
        for system in random.sample(SYSTEMS, len(SYSTEMS)):
            figures = []
            for size in (small, large):
                thread_id = f"it-{system}-{size}-{uuid.uuid4().hex[:8]}"
                with round_trips() as waits, tool_listings() as listings, call_times() as stamps:
                    figures.append((*(await bench.run(system, size, thread_id)), waits[0], listings[0], thread_id))
            (w1, c1, n1, l1, t1), (w2, c2, n2, l2, t2) = figures
            wall[system].append((w2 - w1) / (large - small) * 1000)
            cpu[system].append((c2 - c1) / (large - small) * 1000)
            in_run_wall[system].append(in_run(stamps))
            if rep == reps - 1:
                rows = [(*(await bench.rows(t))[:3], n, listed) for t, n, listed in ((t1, n1, l1), (t2, n2, l2))]
                counts[system] = [(b - a) / (large - small) for a, b in zip(*rows)]
    for system in SYSTEMS:
        ratio_wall = [ours / peer for ours, peer in zip(wall["boundloop"], wall[system])]
        ratio_cpu = [ours / peer for ours, peer in zip(cpu["boundloop"], cpu[system])]
        ratio_in_run = [ours / peer for ours, peer in zip(in_run_wall["boundloop"], in_run_wall[system])]
        checkpoints, writes, blobs, trips, listings = counts[system]
        print(f"{system:>12}: wall {spread(wall[system])} ms, CPU {spread(cpu[system])} ms, in-run wall {spread(in_run_wall[system], 2)} ms; "
              f"boundloop/{system}: wall {spread(ratio_wall, 2)}x, CPU {spread(ratio_cpu, 2)}x, in-run wall {spread(ratio_in_run, 2)}x; "
              f"checkpoints/writes/blobs/psycopg waits/tools lists {checkpoints:.1f} / {writes:.1f} / {blobs:.1f} / {trips:.1f} / {listings:.2f}")
    print(f"load after {load()}")
    return {"wall": wall, "cpu": cpu, "in_run": in_run_wall, "counts": counts}


def in_run(stamps: list[float], skip: int = SETTLING) -> float:
    """Wall ms per iteration within one run: the mean from the MCP call of iteration `skip` (or the
    first, in a run too short for that) to the last. No run's start or end is in it, so it does not
    move with them, as the marginal (a difference of two runs' totals) does; a goal check or a slow
    step inside the span counts in full."""
    kept = stamps[min(skip, len(stamps) - 2):]
    return (kept[-1] - kept[0]) / (len(kept) - 1) * 1000


async def storage(bench: Bench, sizes: list[int]) -> dict[str, dict[int, int]]:
    """Payload bytes of one thread's checkpoint tables after each size (deterministic: one run each)."""
    print(f"\n## checkpoint tables of one thread (payload bytes; load before {load()})")
    payload: dict[str, dict[int, int]] = {system: {} for system in SYSTEMS}
    for size in sizes:
        for system in SYSTEMS:
            thread_id = f"store-{system}-{size}-{uuid.uuid4().hex[:8]}"
            await bench.run(system, size, thread_id)
            checkpoints, writes, blobs, payload[system][size] = await bench.rows(thread_id)
            print(f"{system:>12} {size:>5} it: {payload[system][size] / 1e6:8.3f} MB, rows {checkpoints}/{writes}/{blobs}")
    for system in SYSTEMS:
        growth = ", ".join(f"{b}/{a}: {payload[system][b] / payload[system][a]:.1f}x" for a, b in zip(sizes, sizes[1:]))
        versus = ", ".join(f"{size}: {payload[system][size] / payload['boundloop'][size]:.1f}x boundloop's" for size in sizes)
        print(f"{system:>12}: growth {growth} (linear = the size ratio); {versus}")
    return payload


@dataclass
class Wave:
    """One size of `concurrency`, per system: runs/s and graph steps/s in each repetition, and the
    graph steps a run took (the nodes it ran; LangGraph saves a checkpoint after each)."""

    rates: dict[str, list[float]]
    step_rates: dict[str, list[float]]
    steps_per_run: dict[str, float]


async def concurrency(bench: Bench, waves: list[int], reps: int, run_iterations: int = 1) -> dict[int, Wave]:
    """`runs` runs of `run_iterations` iterations each started at once; runs/s per repetition.
    One iteration shows the fixed cost of a run; more amortise it over the loop (iterations/s =
    runs/s x iterations). Steps/s = runs/s x the graph steps of a run (counted in the saver's
    tables): the two systems' ratio of steps/s is what one step costs, apart from how many a run takes."""
    script = bench.root / f"script-{run_iterations}.json"
    write_script(script, run_iterations)
    task, settings = boundloop_settings(bench.root, script)
    each = "one iteration each" if run_iterations == 1 else f"{run_iterations} iterations each"
    figures: dict[int, Wave] = {}
    for runs in waves:
        print(f"\n## {runs} runs at once ({each}; {reps} repetitions; load before {load()})")
        wave = Wave({system: [] for system in SYSTEMS}, {system: [] for system in SYSTEMS}, {})
        errors = dict.fromkeys(SYSTEMS, 0)
        for _ in range(reps):
            for system in random.sample(SYSTEMS, len(SYSTEMS)):
                if system == "boundloop":
                    starts: list[Any] = [bench.runner.start(task, settings) for _ in range(runs)]
                    thread_ids: list[str] = []
                else:
                    graph = peer_agent(system, bench.bridge, bench.saver, run_iterations)
                    thread_ids = [f"wave-{uuid.uuid4().hex[:10]}" for _ in range(runs)]
                    starts = [graph.ainvoke(PROMPT, peer_config(thread_id), durability="sync") for thread_id in thread_ids]
                started = time.perf_counter()
                results = await asyncio.gather(*starts, return_exceptions=True)
                rate = runs / (time.perf_counter() - started)
                errors[system] += sum(isinstance(r, BaseException) or getattr(r, "status", "SUCCESS") != "SUCCESS" for r in results)
                thread_ids = thread_ids or [r.thread_id for r in results if not isinstance(r, BaseException)]
                wave.steps_per_run[system] = await bench.graph_steps(thread_ids) / len(thread_ids)
                wave.rates[system].append(rate)
                wave.step_rates[system].append(rate * wave.steps_per_run[system])
        for system in SYSTEMS:
            ratio = [ours / peer for ours, peer in zip(wave.rates["boundloop"], wave.rates[system])]
            step_ratio = [ours / peer for ours, peer in zip(wave.step_rates["boundloop"], wave.step_rates[system])]
            print(f"{system:>12}: {spread(wave.rates[system])} runs/s, errors {errors[system]}; boundloop/{system} {spread(ratio, 2)}x; "
                  f"graph steps per run {wave.steps_per_run[system]:.1f}, {spread(wave.step_rates[system], 0)} steps/s, "
                  f"boundloop/{system} {spread(step_ratio, 2)}x")
        print(f"load after {load()}")
        figures[runs] = wave
    return figures


def _first_saved_after(url: str, thread_id: str, before: set[str]) -> float:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT checkpoint_id, checkpoint->>'ts' FROM checkpoints WHERE thread_id = %s", (thread_id,)).fetchall()
    return min(datetime.fromisoformat(ts).timestamp() for checkpoint_id, ts in rows if checkpoint_id not in before)


def _saved(url: str, thread_id: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s", (thread_id,))}


async def crashed_thread(bench: Bench, system: str, history: int) -> str:
    """A thread that stopped (as in a crash) after `history` iterations, waiting for the next model turn."""
    thread_id = f"resume-{system}-{uuid.uuid4().hex[:10]}"
    if system == "boundloop":
        script = bench.root / f"{thread_id}.json"
        write_script(script, history, finish=False)  # the next actor turn raises ScriptExhausted
        task, settings = boundloop_settings(bench.root, script)
        try:
            report = await bench.runner.start(task, settings, thread_id=thread_id)
            raise SystemExit(f"the boundloop run did not stop on the exhausted script: {report.status}")
        except RunStopped:
            pass
        write_script(script, history)  # the resumed run answers at its next turn
    else:
        graph = peer_agent(system, bench.bridge, bench.saver, history, crash_at=history)
        try:
            await graph.ainvoke(PROMPT, peer_config(thread_id), durability="sync")
        except RuntimeError:
            pass
    return thread_id


def resume_command(system: str, url: str, thread_id: str, root: Path, history: int) -> list[str]:
    if system == "boundloop":
        return [str(Path(sys.executable).parent / "boundloop"), "resume", thread_id, "--database-url", url]
    return [sys.executable, "-m", "tests.benchmarks.peer_resume", url, thread_id, str(root), str(history)]


async def resume(bench: Bench, reps: int, history: int = 20) -> dict[str, list[float]]:
    """A fresh process resumes a crashed thread: ms from before its spawn to the first checkpoint
    it saves (the first step after the resume point, whatever the nodes are called)."""
    print(f"\n## resume: process start -> first step saved (history {history} iterations; {reps} repetitions; load before {load()})")
    latency: dict[str, list[float]] = {"boundloop": [], "bare": []}
    for _ in range(reps):
        for system in random.sample(list(latency), len(latency)):
            thread_id = await crashed_thread(bench, system, history)
            before = await asyncio.to_thread(_saved, bench.url, thread_id)
            started = time.time()
            done = await asyncio.to_thread(subprocess.run, resume_command(system, bench.url, thread_id, bench.root, history),
                                           capture_output=True, text=True, timeout=120,
                                           cwd=bench.root if system == "boundloop" else Path(__file__).parents[2])
            if done.returncode != 0:
                raise SystemExit(f"{system} resume failed ({done.returncode}): {done.stderr[-800:]}")
            latency[system].append((await asyncio.to_thread(_first_saved_after, bench.url, thread_id, before) - started) * 1000)
    ratio = [ours / peer for ours, peer in zip(latency["boundloop"], latency["bare"])]
    for system, values in latency.items():
        print(f"{system:>12}: {spread(values, 0)} ms")
    print(f"boundloop/bare {spread(ratio, 2)}x; load after {load()}")
    return latency


async def read(bench: Bench, sizes: list[int], reps: int) -> dict[int, dict[str, list[float]]]:
    """ms to read one thread's state after each size (`aget_state`: what a resume, `boundloop show`
    or the console does first), boundloop against create_agent bare, in this process."""
    print(f"\n## read a thread's state (aget_state; {reps} repetitions; load before {load()})")
    figures: dict[int, dict[str, list[float]]] = {}
    for size in sizes:
        threads = {system: f"read-{system}-{size}-{uuid.uuid4().hex[:8]}" for system in ("boundloop", "bare")}
        readers = {"boundloop": lambda: bench.runner.graph.aget_state({"configurable": {"thread_id": threads["boundloop"]}}),
                   "bare": lambda: bench.graphs[("bare", size)].aget_state(peer_config(threads["bare"]))}
        for system, thread_id in threads.items():
            await bench.run(system, size, thread_id)
        latency: dict[str, list[float]] = {system: [] for system in threads}
        for _ in range(reps):
            for system in random.sample(list(threads), len(threads)):
                started = time.perf_counter()
                await readers[system]()
                latency[system].append((time.perf_counter() - started) * 1000)
        ratio = [ours / peer for ours, peer in zip(latency["boundloop"], latency["bare"])]
        print(f"{size:>5} it: boundloop {spread(latency['boundloop'])} ms, bare {spread(latency['bare'])} ms; "
              f"boundloop/bare {spread(ratio, 2)}x")
        figures[size] = latency
    print(f"load after {load()}")
    return figures


def table(per_it: dict[str, Any], payload: dict[str, dict[int, int]], waves: dict[int, Wave],
          latency: dict[str, list[float]], reps: int) -> str:
    """The performance table of tests/README.md: medians, ratios to boundloop's in parentheses."""
    def cell(values: dict[str, list[float]], system: str, digits: int = 1) -> str:
        ours, peer = values["boundloop"], values[system]
        if system == "boundloop":
            return spread(ours, digits)
        return f"{spread(peer, digits)}; boundloop {spread([a / b for a, b in zip(ours, peer)], 2)}×"

    sizes = sorted(payload["boundloop"])
    lines = [f"| figure (median of {reps}, min–max; load {load()}) | boundloop | create_agent | create_agent + 3 middlewares |",
             "|---|---|---|---|"]
    lines.append("| marginal wall ms per iteration | " + " | ".join(cell(per_it["wall"], s) for s in SYSTEMS) + " |")
    lines.append("| marginal CPU ms per iteration | " + " | ".join(cell(per_it["cpu"], s) for s in SYSTEMS) + " |")
    lines.append("| in-run wall ms per iteration | " + " | ".join(cell(per_it["in_run"], s, 2) for s in SYSTEMS) + " |")
    lines.append("| checkpoints / write rows / blob rows / psycopg waits (DB round trips) / `tools/list` per iteration | "
                 + " | ".join(" / ".join(f"{x:.1f}" for x in per_it["counts"][s]) for s in SYSTEMS) + " |")
    for size in sizes:
        lines.append(f"| checkpoint payload after {size} iterations | "
                     + " | ".join(f"{payload[s][size] / 1e6:.2f} MB" for s in SYSTEMS) + " |")
    for a, b in zip(sizes, sizes[1:]):
        lines.append(f"| storage growth {b}/{a} (linear = {b / a:g}) | "
                     + " | ".join(f"{payload[s][b] / payload[s][a]:.1f}×" for s in SYSTEMS) + " |")
    for runs, wave in waves.items():
        lines.append(f"| {runs} concurrent runs, runs/s | " + " | ".join(cell(wave.rates, s) for s in SYSTEMS) + " |")
        lines.append(f"| {runs} concurrent runs: graph steps per run; steps/s | "
                     + " | ".join(f"{wave.steps_per_run[s]:.0f}; {cell(wave.step_rates, s, 0)}" for s in SYSTEMS) + " |")
    lines.append("| resume, process start → first step saved, ms | " + cell(latency, "boundloop", 0) + " | "
                 + cell(latency, "bare", 0) + " | — |")
    return "\n".join(lines)


async def soak(bench: Bench, total: int, system: str = "boundloop", reps: int = SOAK_RUNS, context_tokens: int | None = None) -> None:
    """`reps` runs of `total` iterations each: wall and CPU (this process) time per iteration over
    the first and last 100 of each, the ratio's spread over the runs, and storage at a quarter of
    the size against the whole (linear = 4; bytes are the same every run, so measured once).
    Each run also splits every iteration into its model request (which handles the whole
    conversation, for either system) and the rest, so what grows with a run can be told apart.
    `context_tokens` (boundloop's runs): the context budget, under which compaction bounds each
    actor request; each run then also says how many compactions it made."""
    ratios: dict[str, list[float]] = {"wall": [], "CPU": [], "rest": []}
    thread_id = ""
    bounded = "" if context_tokens is None else f", context_tokens={context_tokens}"
    for rep in range(reps):
        print(f"\n## soak {rep + 1}/{reps}: one {system} run of {total} iterations{bounded} (load before {load()})")
        thread_id = f"soak-{uuid.uuid4().hex[:10]}"
        with call_times() as stamps, call_times(time.process_time) as cpu_stamps, model_requests() as spans:
            await bench.run(system, total, thread_id, context_tokens)
        if context_tokens is not None:
            print(f"compactions: {(await bench.runner.report(thread_id)).values['usage'].get('compactions', 0)}")
        for name, times in (("wall", stamps), ("CPU", cpu_stamps)):
            gaps = [(b - a) * 1000 for a, b in zip(times, times[1:])]
            ratios[name].append(statistics.median(gaps[-100:]) / statistics.median(gaps[:100]))
            print(f"{name} ms per iteration, first 100: {spread(gaps[:100], 2)}; last 100: {spread(gaps[-100:], 2)}; "
                  f"last/first medians {ratios[name][-1]:.2f}x")
        model = model_share(stamps, spans)
        rest = [(b - a) * 1000 - share for a, b, share in zip(stamps, stamps[1:], model)]
        ratios["rest"].append(statistics.median(rest[-100:]) / statistics.median(rest[:100]))
        print(f"model requests ms per iteration, first 100: {spread(model[:100], 2)}; last 100: {spread(model[-100:], 2)}; "
              f"wall without them, first 100: {spread(rest[:100], 2)}; last 100: {spread(rest[-100:], 2)}; last/first medians {ratios['rest'][-1]:.2f}x")
    if reps > 1:
        print(f"\nlast/first over {reps} runs: wall {spread(ratios['wall'], 2)}x, CPU {spread(ratios['CPU'], 2)}x, "
              f"wall without the model requests {spread(ratios['rest'], 2)}x")
    quarter, size = f"soak-{uuid.uuid4().hex[:10]}", max(total // 4, 1)
    await bench.run(system, size, quarter, context_tokens)
    whole, part = (await bench.rows(thread_id))[3], (await bench.rows(quarter))[3]
    print(f"payload {part / 1e6:.2f} MB at {size}, {whole / 1e6:.2f} MB at {total}: {whole / part:.2f}x (linear = {total / size:g}); load after {load()}")


async def main(options: argparse.Namespace) -> None:
    if options.list_every_call:
        fresh_listing.MAX_FRESH_S = 0.0  # no listing stands in for asking again
    async with AsyncExitStack() as stack:
        bench = await open_bench(stack, os.environ.get("BOUNDLOOP_DATABASE_URL") or await asyncio.to_thread(database_url))
        command: str = options.command
        reps = repetitions(options)
        if command == "iterations":
            await iterations(bench, reps, *options.sizes)
        elif command == "storage":
            await storage(bench, options.sizes or [50, 200, 1000])
        elif command == "concurrency":
            await concurrency(bench, options.runs, reps, options.run_iterations)
        elif command == "resume":
            await resume(bench, reps)
        elif command == "soak":
            await soak(bench, options.iterations, options.system, reps, options.context_tokens)
        elif command == "read":
            await read(bench, options.sizes or [200, 1000], reps)
        else:
            figures = (await iterations(bench, reps), await storage(bench, [50, 200, 1000]),
                       await concurrency(bench, options.runs, reps), await resume(bench, reps))
            print("\n" + table(*figures, reps))


def repetitions(options: argparse.Namespace) -> int:
    """--reps, else the command's default: 5, or 3 runs for a soak."""
    return options.reps or (SOAK_RUNS if options.command == "soak" else REPETITIONS)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parse.add_argument("command", choices=["iterations", "storage", "concurrency", "resume", "table", "soak", "read"])
    parse.add_argument("--reps", type=int, help="repetitions (default 5; soak: runs, default 3)")
    parse.add_argument("--sizes", type=int, nargs="+", default=[], help="iterations: SMALL LARGE (20 60); storage: sizes (50 200 1000); read: sizes (200 1000)")
    parse.add_argument("--runs", type=int, nargs="+", default=[50, 200], help="concurrency: runs started at once")
    parse.add_argument("--run-iterations", type=_positive, default=1, help="concurrency: iterations of each run (1: the fixed cost of a run)")
    parse.add_argument("--iterations", type=int, default=1000, help="soak: iterations of the one run")
    parse.add_argument("--system", choices=SYSTEMS, default="boundloop", help="soak: whose run (boundloop, or create_agent bare or with middlewares)")
    parse.add_argument("--context-tokens", type=_positive, help="soak: boundloop's context budget (compaction keeps each request under it; none by default)")
    parse.add_argument("--list-every-call", action="store_true",
                       help="check every call against a tools/list asked for it, as for an untrusted server (default: the trusted workspace server's promise)")
    return parse


def run(argv: list[str]) -> None:
    parse = parser()
    options = parse.parse_args(argv)
    if options.context_tokens is not None and (options.command != "soak" or options.system != "boundloop"):
        parse.error("--context-tokens bounds a boundloop soak's context; the peers have no structural compaction "
                    "(create_agent's SummarizationMiddleware asks a model): drop it, or use it with `soak` for boundloop")
    asyncio.run(main(options))


if __name__ == "__main__":
    run(sys.argv[1:])
