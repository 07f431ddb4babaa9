"""End-to-end benchmark: task families on boundloop and on LangChain's create_agent, with model latency.

    .venv/bin/pip install -e '.[bench]'                 # the peer (langchain), once
    .venv/bin/python -m tests.benchmarks.families [--reps 5] [--latency-ms 300] [--per-token-ms 2] [--concurrency 50]

The same tasks for both systems, in one process, on the same Postgres saver and the same workspace
MCP server (stdio, one session shared by the runs): every model is scripted and every model call
pays the same latency (`Latency`: a base per call plus time per output token), so a system that
makes fewer calls, or shorter replies, finishes sooner.

Families (`FAMILIES`):
- simple: read notes.md, write summary.md (a deterministic check reads it back), answer.
- medium: read notes.md, read the file it names, write report.md from both (a check), answer.
- hard: as simple, but the first write misses the action item: the check fails, and boundloop
  repairs it (the critic, triggered by the failed check, then a second write); create_agent has
  no check, so it ends with the first attempt, and the benchmark says whether its file passes.
- long: 60 reads of a 2,460-character file, then an answer; boundloop under a context budget
  (`LONG_CONTEXT_TOKENS`: bounded results and compaction), create_agent resending its history.
  The task has no acceptance criterion, so boundloop's confidence without a critic stays under the
  commit threshold and the critic runs once (its trigger, as a user's run would).

Per family and system: model calls, input and output tokens, wall per run (sequential runs) and
runs/s with `--concurrency` runs at once (not for long: its runs are long and its figure is the
tokens). Tokens are one estimate for both systems, made at each model call by the same function
(`estimate`): a quarter of the characters of every message's content and tool calls sent (input)
and of the reply (output); tool schemas count for neither. Each figure is the median over the
repetitions with its min–max; ratios are taken within each repetition; the load average is printed.
Asserts nothing. Database: BOUNDLOOP_DATABASE_URL, else the embedded cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool

from boundloop.checkpoints.pool import database_url
from boundloop.checkpoints.saver import postgres_saver
from boundloop.graph.core.status import Terminal
from boundloop.graph.models.scripted import ROLE_KEY, ScriptedChatModel
from boundloop.graph.run.runner import Runner
from boundloop.graph.services import default_servers
from boundloop.graph.task import RunSettings, Task
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from tests.benchmarks.peer import load, spread
from tests.benchmarks.peer_agent import LIMIT, PEERS, peer_config

SYSTEMS = ("boundloop", *PEERS)
PREFIX = "workspace__"
NOTES = "Action items:\n- Ana: publish the notes\nDetails: plan.md\n"
PLAN = "Deadline: Friday\nOwner: Ana\n"
LOG = "".join(f"{n:04d} request served in {10 + n % 7} ms by worker {n % 3}\n" for n in range(60))
LONG_READS = 60
LONG_CONTEXT_TOKENS = 6000
"""boundloop's context budget in the long family: compaction keeps each actor request under 80% of it."""
CRITIC_FAIL = {"content": {"scores": {"correctness": 0.4, "completeness": 0.5, "coherence": 0.9, "safety": 1},
                           "defects": [{"problem": "summary.md leaves out Ana's action item"}]}}
CRITIC_PASS = {"content": {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []}}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": PREFIX + name, "args": args}


def turn(content: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    """One scripted reply (no usage: the counted tokens are `estimate`'s, for both systems)."""
    return {"content": content, "tool_calls": list(calls)}


def check(path: str, expect: str) -> dict[str, Any]:
    return {"name": f"{path} names {expect}", "tool": PREFIX + "read_file", "args": {"path": path}, "expect_contains": expect}


@dataclass(frozen=True)
class Family:
    """One task: boundloop's task and script, the peer's replies (the same actor turns, unprefixed)."""

    name: str
    task: dict[str, Any]
    roles: dict[str, list[dict[str, Any]]]
    peer_turns: list[dict[str, Any]]
    outcome: tuple[str, str] | None = None
    """(path, text): after a run, whether the file holds the text (what the task's check asks)."""
    context_tokens: int | None = None
    concurrent: bool = True


def _family(name: str, task: dict[str, Any], actor: list[dict[str, Any]], *, peer: list[dict[str, Any]] | None = None,
            critic: list[dict[str, Any]] | None = None, outcome: tuple[str, str] | None = None,
            context_tokens: int | None = None, concurrent: bool = True) -> Family:
    roles = {"actor": actor, **({"critic": critic} if critic else {})}
    unprefixed = [{**step, "tool_calls": [{**c, "name": c["name"].removeprefix(PREFIX)} for c in step["tool_calls"]]}
                  for step in (peer or actor)]
    return Family(name, task, roles, unprefixed, outcome, context_tokens, concurrent)


WRITE_SUMMARY = call("write_file", path="summary.md", content="- Ana: publish the notes\n")
FAMILIES: dict[str, Family] = {family.name: family for family in (
    _family("simple", {"goal": "Write the action items of notes.md to summary.md", "acceptance_criteria": ["summary.md names Ana"],
                       "checks": [check("summary.md", "Ana")]},
            [turn("", call("read_file", path="notes.md")), turn("", WRITE_SUMMARY), turn("summary.md lists the action items")],
            outcome=("summary.md", "Ana")),
    _family("medium", {"goal": "Write report.md: the action items of notes.md with the deadline from the file notes.md names",
                       "acceptance_criteria": ["report.md names Friday"], "checks": [check("report.md", "Friday")]},
            [turn("", call("read_file", path="notes.md")), turn("", call("read_file", path="plan.md")),
             turn("", call("write_file", path="report.md", content="- Ana: publish the notes (by Friday)\n")),
             turn("report.md lists Ana's action item, due Friday")],
            outcome=("report.md", "Friday")),
    _family("hard", {"goal": "Write the action items of notes.md to summary.md", "acceptance_criteria": ["summary.md names Ana"],
                     "checks": [check("summary.md", "Ana")]},
            [turn("", call("read_file", path="notes.md")), turn("", call("write_file", path="summary.md", content="- someone: publish\n")),
             turn("summary.md lists the action items"), turn("", WRITE_SUMMARY), turn("summary.md now names Ana")],
            peer=[turn("", call("read_file", path="notes.md")), turn("", call("write_file", path="summary.md", content="- someone: publish\n")),
                  turn("summary.md lists the action items")],
            critic=[CRITIC_FAIL, CRITIC_PASS], outcome=("summary.md", "Ana")),
    _family("long", {"goal": "Read log.md 60 times and say how many requests it lists"},
            [turn("", call("read_file", path="log.md", max_chars=3000 + n)) for n in range(LONG_READS)] + [turn("log.md lists 60 requests")],
            critic=[CRITIC_PASS], context_tokens=LONG_CONTEXT_TOKENS, concurrent=False),
)}
"""Each read in the long family asks for a different max_chars, so the repeated-call breaker, rightly, does not step in."""


def estimate(messages: Sequence[BaseMessage]) -> int:
    """Tokens of `messages`: a quarter of the characters of their content and tool calls."""
    chars = 0
    for message in messages:
        chars += len(message.content if isinstance(message.content, str) else json.dumps(message.content))
        calls = getattr(message, "tool_calls", None)
        if calls:
            chars += len(json.dumps([{"name": c["name"], "args": c["args"]} for c in calls]))
    return chars // 4


@dataclass
class Meter:
    """What the model calls of a stretch of runs cost: calls per role, input and output tokens."""

    roles: Counter[str] = field(default_factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def calls(self) -> int:
        return sum(self.roles.values())


@dataclass(frozen=True)
class Latency:
    """A model call's latency: `base_s` plus `per_token_s` for each output token of its reply."""

    base_s: float = 0.3
    per_token_s: float = 0.0

    def of(self, output_tokens: int) -> float:
        return self.base_s + self.per_token_s * output_tokens


@contextmanager
def latency_model(latency: Latency, classes: Sequence[type[BaseChatModel]]) -> Iterator[list[Meter]]:
    """While the context lasts, every async generation of `classes` is metered (into the newest meter
    of the yielded list) and then sleeps for its latency: both systems' models pay the same."""
    meters = [Meter()]
    originals = {cls: cls.__dict__["_agenerate"] for cls in classes}

    def wrap(original: Any) -> Any:
        async def _agenerate(self: BaseChatModel, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> ChatResult:
            result = await original(self, messages, stop, run_manager, **kwargs)
            output = estimate([result.generations[0].message]) + 1
            meter = meters[-1]
            meter.roles[(getattr(run_manager, "metadata", None) or {}).get(ROLE_KEY, "actor")] += 1
            meter.input_tokens += estimate(messages)
            meter.output_tokens += output
            await asyncio.sleep(latency.of(output))
            return result

        return _agenerate

    for cls, original in originals.items():
        cls._agenerate = wrap(original)  # type: ignore[method-assign]
    try:
        yield meters
    finally:
        for cls, original in originals.items():
            cls._agenerate = original  # type: ignore[method-assign]


class FamilyModel(BaseChatModel):
    """The peer's scripted model: the reply for turn n is `turns[n]` (n = the AI messages so far)."""

    turns: list[dict[str, Any]]

    @property
    def _llm_type(self) -> str:
        return "bench-family"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "FamilyModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        n = sum(isinstance(message, AIMessage) for message in messages)
        step = self.turns[n]
        calls = [{"name": c["name"], "args": c["args"], "id": f"c{n}_{i}", "type": "tool_call"} for i, c in enumerate(step["tool_calls"])]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(step["content"], tool_calls=calls))])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return self._generate(messages)


def workspace_tools(bridge: MCPBridge) -> list[StructuredTool]:
    """The workspace server's read_file and write_file, through the one shared MCP session."""
    async def read_file(path: str, max_chars: int | None = None) -> str:
        """Read a file of the workspace."""
        args = {"path": path, **({"max_chars": max_chars} if max_chars else {})}
        return (await bridge.call("workspace", "read_file", args, timeout_s=10)).text

    async def write_file(path: str, content: str) -> str:
        """Write a file of the workspace (its whole content)."""
        return (await bridge.call("workspace", "write_file", {"path": path, "content": content}, timeout_s=10)).text

    return [StructuredTool.from_function(coroutine=read_file, name="read_file"),
            StructuredTool.from_function(coroutine=write_file, name="write_file")]


def family_peer(kind: str, family: Family, bridge: MCPBridge, saver: Any) -> Any:
    """create_agent for `family`: bare, or with the three middlewares (every call auto-approved, as the
    benchmark's boundloop runs are unattended and its policy lets workspace writes through)."""
    middleware: list[Any] = []
    if kind == "middlewares":
        middleware = [HumanInTheLoopMiddleware(interrupt_on={"read_file": False, "write_file": False}),
                      ModelCallLimitMiddleware(run_limit=LIMIT), ToolCallLimitMiddleware(run_limit=LIMIT)]
    return create_agent(FamilyModel(turns=family.peer_turns), workspace_tools(bridge), middleware=middleware, checkpointer=saver)


@dataclass
class Outcome:
    """One sequential run: its wall time, what its model calls cost, how it ended."""

    wall_s: float
    meter: Meter
    ending: str
    passed: bool | None
    report: Any = None


@dataclass
class Bench:
    root: Path
    runner: Runner
    saver: Any
    bridge: MCPBridge
    meters: list[Meter]
    scripts: dict[str, Path] = field(default_factory=dict)
    graphs: dict[tuple[str, str], Any] = field(default_factory=dict)

    def settings(self, family: Family) -> tuple[Task, RunSettings]:
        script = self.scripts.get(family.name)
        if script is None:
            script = self.scripts[family.name] = self.root.parent / f"{self.root.name}-{family.name}.json"
            script.write_text(json.dumps({"model_id": "bench", "roles": family.roles}))
        budget: dict[str, Any] = dict.fromkeys(["model_turns", "tool_calls", "input_tokens", "output_tokens", "wall_clock_s", "tool_result_chars"])
        if family.context_tokens is not None:
            budget["context_tokens"] = family.context_tokens
        task = Task.model_validate({**family.task, "budget": budget})
        return task, RunSettings(model="scripted", script=str(script), workspace_root=str(self.root), unattended=True)

    def peer(self, system: str, family: Family) -> Any:
        graph = self.graphs.get((system, family.name))
        if graph is None:
            graph = self.graphs[(system, family.name)] = family_peer(system, family, self.bridge, self.saver)
        return graph

    def start(self, system: str, family: Family) -> Any:
        """The coroutine of one run (a RunReport for boundloop, the final state for the peer)."""
        if system == "boundloop":
            return self.runner.start(*self.settings(family))
        prompt = {"messages": [("user", family.task["goal"])]}
        return self.peer(system, family).ainvoke(prompt, peer_config(f"family-{system}-{uuid.uuid4().hex[:10]}"), durability="sync")

    async def run(self, system: str, family: Family) -> Outcome:
        """One run alone, metered; its files are reset first."""
        reset(self.root)
        self.meters.append(Meter())
        started = time.perf_counter()
        result = await self.start(system, family)
        wall = time.perf_counter() - started
        meter = self.meters.pop()
        passed = None
        if family.outcome is not None:
            path, text = family.outcome
            passed = (self.root / path).exists() and text in (self.root / path).read_text()
        if system == "boundloop":
            return Outcome(wall, meter, result.status, passed, result)
        final = result["messages"][-1]
        return Outcome(wall, meter, f"answer {str(final.content)[:60]!r}", passed)


def reset(root: Path) -> None:
    """The workspace every run starts from."""
    for name in ("summary.md", "report.md"):
        (root / name).unlink(missing_ok=True)
    (root / "notes.md").write_text(NOTES)
    (root / "plan.md").write_text(PLAN)
    (root / "log.md").write_text(LOG)


async def open_bench(stack: AsyncExitStack, url: str, meters: list[Meter]) -> Bench:
    root = Path(tempfile.mkdtemp(prefix="bench-families-"))
    reset(root)
    runner = await stack.enter_async_context(Runner(url, max_active_runs=256))
    saver = await stack.enter_async_context(postgres_saver(runner.pool))
    bridge = await stack.enter_async_context(MCPBridge(load_servers(default_servers(str(root)))))
    return Bench(root, runner, saver, bridge, meters)


@dataclass
class Figures:
    """Per system, one value per repetition."""

    calls: dict[str, list[float]]
    input_tokens: dict[str, list[float]]
    output_tokens: dict[str, list[float]]
    wall: dict[str, list[float]]
    rates: dict[str, list[float]]
    endings: dict[str, Counter[str]]
    roles: dict[str, Counter[str]]


def _per_system() -> dict[str, list[float]]:
    return {system: [] for system in SYSTEMS}


async def wave(bench: Bench, system: str, family: Family, runs: int) -> tuple[float, int]:
    """`runs` runs started at once: (runs/s, runs that did not end well)."""
    reset(bench.root)
    bench.meters.append(Meter())
    started = time.perf_counter()
    results = await asyncio.gather(*(bench.start(system, family) for _ in range(runs)), return_exceptions=True)
    rate = runs / (time.perf_counter() - started)
    bench.meters.pop()
    failed = sum(isinstance(r, BaseException) or (system == "boundloop" and r.status != Terminal.SUCCESS) for r in results)
    return rate, failed


async def measure(bench: Bench, family: Family, reps: int, runs: int) -> Figures:
    """`reps` repetitions; in each, every system (in a random order) runs the family once alone, then
    `runs` at once (unless the family is not `concurrent`)."""
    figures = Figures(_per_system(), _per_system(), _per_system(), _per_system(), _per_system(),
                      {s: Counter() for s in SYSTEMS}, {s: Counter() for s in SYSTEMS})
    errors = dict.fromkeys(SYSTEMS, 0)
    for _ in range(reps):
        for system in random.sample(SYSTEMS, len(SYSTEMS)):
            outcome = await bench.run(system, family)
            figures.calls[system].append(outcome.meter.calls)
            figures.input_tokens[system].append(outcome.meter.input_tokens)
            figures.output_tokens[system].append(outcome.meter.output_tokens)
            figures.wall[system].append(outcome.wall_s)
            check = "" if outcome.passed is None else f"; check {'passes' if outcome.passed else 'fails'}"
            figures.endings[system][outcome.ending + check] += 1
            figures.roles[system] += outcome.meter.roles
            if family.concurrent and runs:
                rate, failed = await wave(bench, system, family, runs)
                figures.rates[system].append(rate)
                errors[system] += failed
    for system in SYSTEMS:
        if errors[system]:
            figures.endings[system][f"{errors[system]} concurrent runs failed"] += 1
    return figures


def ratio(values: dict[str, list[float]], system: str, digits: int = 2) -> str:
    return spread([ours / peer for ours, peer in zip(values["boundloop"], values[system])], digits)


def report(family: Family, figures: Figures, reps: int, runs: int) -> list[str]:
    """Prints the family's figures; returns its rows of the markdown table."""
    rows = []
    for system in SYSTEMS:
        roles = ", ".join(f"{role} {count / reps:g}" for role, count in sorted(figures.roles[system].items()))
        endings = "; ".join(f"{count}× {ending}" for ending, count in figures.endings[system].items())
        line = (f"{family.name:>6} {system:>12}: model calls {spread(figures.calls[system], 0)} ({roles}); "
                f"tokens in {spread(figures.input_tokens[system], 0)}, out {spread(figures.output_tokens[system], 0)}; "
                f"wall {spread([w * 1000 for w in figures.wall[system]], 0)} ms")
        if figures.rates[system]:
            line += f"; {runs} at once {spread(figures.rates[system], 2)} runs/s"
        if system != "boundloop":
            line += (f"; boundloop/{system}: calls {ratio(figures.calls, system)}x, tokens in {ratio(figures.input_tokens, system)}x, "
                     f"out {ratio(figures.output_tokens, system)}x, wall {ratio(figures.wall, system)}x")
            if figures.rates[system]:
                line += f", runs/s {ratio(figures.rates, system)}x"
        print(line + f"; ends: {endings}")
        rows.append(row(family, figures, system))
    return rows


def row(family: Family, figures: Figures, system: str) -> str:
    """One markdown row: the system's medians (min–max), and for a peer boundloop's ratios to it."""
    def cell(values: dict[str, list[float]], digits: int, scale: float = 1.0) -> str:
        if not values[system]:
            return "—"
        text = spread([v * scale for v in values[system]], digits)
        return text if system == "boundloop" else f"{text}; {ratio(values, system)}×"

    ending = "; ".join(f"{ending}" for ending in figures.endings[system])
    return (f"| {family.name} | {system} | {cell(figures.calls, 0)} | {cell(figures.input_tokens, 0)} | {cell(figures.output_tokens, 0)} | "
            f"{cell(figures.wall, 0, 1000)} | {cell(figures.rates, 2)} | {ending} |")


async def main(options: argparse.Namespace) -> None:
    latency = Latency(options.latency_ms / 1000, options.per_token_ms / 1000)
    families = [FAMILIES[name] for name in options.families]
    with latency_model(latency, (ScriptedChatModel, FamilyModel)) as meters:
        async with AsyncExitStack() as stack:
            url = os.environ.get("BOUNDLOOP_DATABASE_URL") or await asyncio.to_thread(database_url)
            if url is None:
                raise SystemExit("no database: set BOUNDLOOP_DATABASE_URL")
            bench = await open_bench(stack, url, meters)
            for system in SYSTEMS:  # warm up: imports, the workspace server, the first plans
                await bench.run(system, FAMILIES["simple"])
            settings = (f"{options.reps} repetitions, latency {options.latency_ms:g} ms a call + {options.per_token_ms:g} ms an output token, "
                        f"{options.concurrency} runs at once")
            print(f"# families: {settings}; load before {load()}")
            rows = []
            for family in families:
                print(f"\n## {family.name} (load before {load()})")
                rows += report(family, await measure(bench, family, options.reps, options.concurrency), options.reps, options.concurrency)
            print(f"\nload after {load()}\n")
            print(f"| family | system | model calls | input tokens | output tokens | wall ms per run | runs/s, {options.concurrency} at once | ends |")
            print("|---|---|---|---|---|---|---|---|")
            print("\n".join(rows))


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parse.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parse.add_argument("--latency-ms", type=float, default=300.0, help="each model call's base latency (default 300)")
    parse.add_argument("--per-token-ms", type=float, default=2.0, help="latency per output token (default 2)")
    parse.add_argument("--concurrency", type=int, default=50, help="runs started at once for runs/s (default 50; 0: none)")
    parse.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    return parse


if __name__ == "__main__":
    asyncio.run(main(parser().parse_args()))
