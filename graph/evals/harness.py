"""harness: run a suite's scenarios through one `Runner` and record what each run did.

Scenarios run concurrently in this process (`Suite.concurrency`), each on a fresh workspace and
thread, through the real loop: the same graph, Postgres, MCP servers and gate as `boundloop run`.
When a run waits for a human, the scenario's next decision is given the way `boundloop approve`
gives it; a run with no decision left stays waiting and reports its waiting code.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from boundloop.graph.core.errors import BoundloopError
from boundloop.graph.evals import Provider
from boundloop.graph.evals.grounding_audit import StepVerdict, audit_grounding
from boundloop.graph.evals.memory_audit import MemoryVerdict, audit_run
from boundloop.graph.evals.provider_server import ScriptServer
from boundloop.graph.evals.suite import Scenario, Suite
from boundloop.graph.trace.replay import STEP_KINDS, replay_run
from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.services import default_servers
from boundloop.graph.task import RunSettings
from boundloop.graph.trace.fields import missing_trace_fields
from boundloop.tools.errors import ToolsError

FAIL_CLOSED = frozenset({"CONFIRM_REQUIRED", "REVIEW_REQUIRED", "MISSING_INFO", "AMBIGUOUS_INTENT", "PERMISSION_DENIED", "UNSAFE_DETECTION"})
"""Endings that put the decision in a human's hands or refuse to go on: an escalation."""
REFUSED_BY_AUTHORITY = frozenset({"denied", "rejected"})
"""Call outcomes where policy or a person refused the call: an escalation that failed closed."""


@dataclass
class RunOutcome:
    """One run of one scenario, as the metrics need it."""

    scenario: str
    mode: str
    expected: str
    terminal: str
    thread_id: str | None = None
    path: list[str] = field(default_factory=list)
    golden: list[str] | None = None
    expected_escalation: bool = False
    asked: int = 0
    """Human requests the run made (each wait counts)."""
    usage: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    observations: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    plan_steps: list[dict[str, Any]] = field(default_factory=list)
    waiting: bool = False
    """The run ended waiting for a human (no decision left in the scenario)."""
    deterministic: bool | None = None
    """Replay scenarios: whether a second run took the same path, calls and ending."""
    replay_valid: bool | None = None
    """Whether `boundloop.graph.trace.replay` found the trajectory valid against the compiled graph (None: no run)."""
    replay_problems: list[str] = field(default_factory=list)
    replay_difference: str | None = None
    """Replay scenarios whose second run differed: the first thing that differed."""
    trace_missing: list[str] | None = None
    memory: list[MemoryVerdict] = field(default_factory=list)
    """Each memory candidate the write gate decided, against the scenario's label (graph/evals/memory_audit.py)."""
    grounding: list[StepVerdict] = field(default_factory=list)
    """Each plan step marked done with tools, verified again from the payload store, the ledger and
    the workspace (graph/evals/grounding_audit.py)."""
    corrections: int = 0
    """Times a person changed the run's course (graph/evals/harness.py `corrections`)."""
    model_calls: int = 0
    tokens: int = 0
    error: str | None = None
    seconds: float = 0.0

    @property
    def escalated(self) -> bool:
        return (self.asked > 0 or self.terminal in FAIL_CLOSED
                or any(obs.get("status") in REFUSED_BY_AUTHORITY for obs in self.observations))

    @property
    def problems(self) -> list[str]:
        """Why this run misses what its scenario expects, one line each; empty when it meets it:
        an error, another ending, a `golden` scenario off its path, a replay scenario whose second
        run differed, a trajectory the compiled graph does not allow. (Trace completeness and the
        rates are metrics, gated by the suite's thresholds.)"""
        found = [self.error] if self.error else []
        if self.terminal != self.expected:
            found.append(f"ended {self.terminal}, expected {self.expected}")
        if self.mode == "golden" and self.golden is not None and self.path != self.golden:
            found.append(f"path deviates from the golden path {_deviation(self.path, self.golden)}")
        if self.deterministic is False:
            found.append(f"a second run differed: {self.replay_difference or 'another path, other calls or another ending'}")
        if self.replay_valid is False:
            found.append("trajectory not valid on replay against the graph: " + "; ".join(self.replay_problems[:1] or ["no reason given"]))
        return found


def _deviation(path: list[str], golden: list[str]) -> str:
    """Where a path leaves its golden path: `at step 4: took verify, golden act`."""
    for index, (taken, expected) in enumerate(zip(path, golden)):
        if taken != expected:
            return f"at step {index + 1}: took {taken}, golden {expected}"
    if len(path) > len(golden):
        return f"after step {len(golden)}: took {path[len(golden)]}, golden ends"
    return f"after step {len(path)}: the run ended, golden {golden[len(path)]}"


PROVIDER_KEY = "local-script-server"
"""The key the runs send the local script server (it checks none); given as a config file's `api_key`."""


async def run_suite(runner: Runner, suite: Suite, provider: Provider = "scripted") -> list[RunOutcome]:
    """Every run of every scenario (a scenario with `repeat: n` gives n outcomes), in suite order."""
    slots = asyncio.Semaphore(suite.concurrency)

    async def one(scenario: Scenario) -> RunOutcome:
        async with slots:
            return await run_scenario(runner, suite, scenario, provider)

    jobs = [one(scenario) for scenario in suite.scenarios for _ in range(scenario.repeat)]
    return list(await asyncio.gather(*jobs))


async def run_scenario(runner: Runner, suite: Suite, scenario: Scenario, provider: Provider = "scripted") -> RunOutcome:
    outcome = RunOutcome(scenario.name, scenario.mode, scenario.expect.terminal.value, "ERROR",
                         golden=scenario.expect.golden, expected_escalation=scenario.expect.escalates)
    started = time.monotonic()
    try:
        with _scratch() as scratch:
            first = await _drive(runner, suite, scenario, outcome, scratch, provider)
            await _record(runner, first, outcome, scenario, scratch / "workspace")
        if scenario.replay:
            again = RunOutcome(scenario.name, scenario.mode, outcome.expected, "ERROR")
            with _scratch() as scratch:
                second = await _drive(runner, suite, scenario, again, scratch, provider)
                await _record(runner, second, again, scenario, scratch / "workspace")
            outcome.replay_difference = _difference(outcome, again)
            outcome.deterministic = outcome.replay_difference is None
    except (BoundloopError, ToolsError) as error:
        outcome.error = f"{type(error).__name__}: {error}"
    outcome.seconds = round(time.monotonic() - started, 3)
    return outcome


@contextmanager
def _scratch() -> Iterator[Path]:
    """A fresh directory for one run's workspace and script, removed once the run is recorded
    (the grounding audit re-checks the workspace first)."""
    scratch = Path(tempfile.mkdtemp(prefix="boundloop-eval-"))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _drive(runner: Runner, suite: Suite, scenario: Scenario, outcome: RunOutcome, scratch: Path,
                 provider: Provider) -> RunReport:
    if provider == "http" and scenario.script is not None:
        with ScriptServer(scenario.script, faults=scenario.http_faults) as server:  # type: ignore[arg-type]  # the suite validator makes it a Script
            return await _conduct(runner, scenario, outcome, _settings(suite, scenario, scratch, server.base_url))
    return await _conduct(runner, scenario, outcome, _settings(suite, scenario, scratch))


async def _conduct(runner: Runner, scenario: Scenario, outcome: RunOutcome, settings: RunSettings) -> RunReport:
    """Start the run and give the scenario's decisions while it waits."""
    report = await runner.start(scenario.task, settings)
    outcome.thread_id = report.thread_id
    decisions = list(scenario.decisions)
    while report.interrupts:
        outcome.asked += 1
        if not decisions:
            break
        request = report.interrupts[0]["value"]
        call_id = request.get("call_id") if isinstance(request, dict) else None
        report = await runner.decide(report.thread_id, call_id, decisions.pop(0))  # type: ignore[arg-type]  # a request without a call id (ask_user, budget) waits under None
    return report


def _settings(suite: Suite, scenario: Scenario, scratch: Path, script_url: str | None = None) -> RunSettings:
    """The run's settings; with `script_url` the script's model is reached there, by its model id,
    with a key from a config file, as a user points a run at an OpenAI-compatible endpoint."""
    workspace = scratch / "workspace"
    workspace.mkdir()
    for name, text in scenario.workspace.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    chosen: dict[str, Any] = {**suite.settings, **scenario.settings, "workspace_root": str(workspace)}
    if scenario.endpoint is not None:
        chosen |= {"model": scenario.endpoint.model, "base_url": scenario.endpoint.base_url, "script": None}
    elif script_url is not None:
        key_file = scratch / "provider.json"
        key_file.write_text(json.dumps({"api_key": PROVIDER_KEY}))
        chosen |= {"model": scenario.script.model_id, "base_url": script_url, "script": None, "api_key_file": str(key_file)}  # type: ignore[union-attr]  # the suite validator makes it a Script
    else:
        script = scratch / "script.json"
        script.write_text(scenario.script.model_dump_json())  # type: ignore[union-attr]  # the suite validator makes it a Script
        chosen |= {"model": "scripted", "script": str(script)}
    if scenario.servers:
        extra = json.loads(json.dumps(scenario.servers).replace("{python}", _json_text(sys.executable))
                           .replace("{workspace}", _json_text(str(workspace))))
        servers = default_servers(str(workspace))
        servers["mcpServers"].update(extra)
        chosen["servers"] = servers
    return RunSettings(**chosen)


def _json_text(value: str) -> str:
    return json.dumps(value)[1:-1]


async def _record(runner: Runner, report: RunReport, outcome: RunOutcome, scenario: Scenario, workspace: Path) -> None:
    values = report.values
    outcome.terminal, outcome.waiting = report.status, report.waiting
    events = await runner.trace(report.thread_id)
    steps = sorted((event for event in events if event["kind"] in STEP_KINDS), key=lambda event: (event["data"]["step"], event["node"]))
    outcome.path = [event["node"] for event in steps]  # the nodes of one step (the judge's and the critic's) in name order
    outcome.usage = values.get("usage") or {}
    outcome.budget = values.get("budget") or {}
    outcome.observations = values.get("observations") or []
    outcome.approvals = values.get("approvals") or []
    outcome.plan_steps = (values.get("plan") or {}).get("steps") or []
    replay = await replay_run(runner.pool, report.thread_id, runner.graph)
    outcome.replay_valid, outcome.replay_problems = replay.valid, list(replay.problems)
    outcome.trace_missing = await missing_trace_fields(runner.pool, report.thread_id)
    outcome.memory = await audit_run(runner.pool, report.thread_id, events, values, scenario.expect.memories)
    outcome.grounding = await audit_grounding(runner.pool, report.thread_id, values, workspace, events)
    outcome.corrections = corrections(events)
    by_role = outcome.usage.get("calls_by_role") or {}
    outcome.model_calls = sum(int(count) for count in by_role.values()) if by_role else int(outcome.usage.get("model_turns") or 0)
    outcome.tokens = int(outcome.usage.get("input_tokens") or 0) + int(outcome.usage.get("output_tokens") or 0)


REWORK = frozenset({"plan", "act", "repair"})
"""Where an answered escalation sends a run the person sent back to work (not on to commit or the end)."""


def corrections(events: list[dict[str, Any]]) -> int:
    """Times a person changed the run's course, read from its trace: a proposed call refused,
    edited or answered in its place (an `approve` decision other than approve), or an escalation
    answered by sending the run back to re-plan or rework, or by ending it short of success (a
    question answered, a review, plan or result rejected, a disagreement settled). A budget
    extension, granted or not, is a grant, not a correction; an accepted review is no correction."""
    found = 0
    for event in events:
        escalation = (event.get("data") or {}).get("escalation") or {}
        if event.get("node") == "approve" and escalation.get("decision") not in (None, "approve"):
            found += 1
        elif event.get("node") == "escalate" and escalation.get("type") != "budget_extension":
            stopped = str(((event.get("data") or {}).get("ending") or {}).get("code", ""))
            if escalation.get("resume_to") in REWORK or stopped and stopped not in ("SUCCESS", "PARTIAL_SUCCESS"):
                found += 1
    return found


def _signature(outcome: RunOutcome) -> tuple[Any, ...]:
    calls = tuple((obs.get("tool"), obs.get("args_hash"), obs.get("status")) for obs in outcome.observations)
    return outcome.terminal, tuple(outcome.path), calls


def _difference(first: RunOutcome, second: RunOutcome) -> str | None:
    """The first of ending, path and calls (tool, arguments, outcome) where two runs differ; None: the same."""
    one, two = _signature(first), _signature(second)
    if one[0] != two[0]:
        return f"ended {two[0]}, the first run {one[0]}"
    if one[1] != two[1]:
        return f"path {_deviation(list(two[1]), list(one[1])).replace('golden', 'first run')}"
    for index, (call, other) in enumerate(zip(one[2], two[2])):
        if call[:2] != other[:2]:
            return f"call {index + 1}: {other[0]} with other arguments than the first run's {call[0]}"
        if call != other:
            return f"call {index + 1}: {other[0]} ended {other[2]}, in the first run {call[2]}"
    if len(one[2]) != len(two[2]):
        return f"{len(two[2])} calls, the first run {len(one[2])}"
    return None
