"""The shipped evaluation suite (graph/evals/default.json) as CI's regression gate.

The default test suite runs its `quick` scenarios (one or more per test mode); with
BOUNDLOOP_EVAL_FULL=1 it runs all of them (graph/evals/README.md). Its golden and fault families
also run through the provider path: each scenario's script served by the local OpenAI-compatible
script server (graph/evals/provider_server.py), the runs pointed at it by model name, base URL and
a config file's key, as a user points a run at a provider.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from boundloop.graph.core.budget import Budget
from boundloop.graph.evals.harness import run_suite
from boundloop.graph.evals.metrics import compute, misses
from boundloop.graph.evals.provider_server import HttpFault
from boundloop.graph.evals.suite import load_suite, provider_selection, quick_selection
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal

SUITE = Path(str(resources.files("graph") / "evals" / "default.json"))
FULL = os.environ.get("BOUNDLOOP_EVAL_FULL") == "1"


async def test_the_shipped_suite_meets_its_thresholds(db_url: str) -> None:
    suite = load_suite(SUITE)
    chosen = suite if FULL else quick_selection(suite)
    async with Runner(db_url) as runner:
        outcomes = await run_suite(runner, chosen)
    assert {run.scenario: run.problems for run in outcomes if run.problems} == {}
    assert misses(compute(outcomes), chosen.thresholds) == []


async def test_the_golden_and_fault_families_meet_their_expectations_over_http(db_url: str) -> None:
    suite = load_suite(SUITE)
    chosen = provider_selection(suite if FULL else quick_selection(suite))
    assert {scenario.mode for scenario in chosen.scenarios} == {"golden", "fault"}
    async with Runner(db_url) as runner:
        outcomes = await run_suite(runner, chosen, provider="http")
        retried = {run.scenario: [(event["data"]["role"], event["data"]["error"]) for event in await runner.trace(run.thread_id)
                                  if event["kind"] == "model_retry"] for run in outcomes}
    assert {run.scenario: run.problems for run in outcomes if run.problems} == {}
    assert misses(compute(outcomes), chosen.thresholds) == []
    injected = {scenario.name: scenario.http_faults for scenario in chosen.scenarios if scenario.http_faults}
    assert {"status", "hang_s", "close", "body"} <= {kind for faults in injected.values() for items in faults.values()
                                                     for fault in items for kind in fault.model_fields_set}
    # every injected transport fault was met by the run, seen as the provider failure it is, and retried
    for name, faults in injected.items():
        expected = [(role, reason(fault)) for role, items in faults.items() for fault in items]
        assert [(role, error[:len(why)]) for (role, error), (_, why) in zip(retried[name], expected)] == expected, retried[name]
        assert len(retried[name]) == len(expected), retried[name]
    assert all(not retried[run.scenario] for run in outcomes if run.scenario not in injected)


def reason(fault: HttpFault) -> str:
    """How the model client names a transport fault when it retries: the start of the trace's `error`."""
    if fault.status is not None:
        return f"HTTP {fault.status} from the provider"
    if fault.hang_s is not None:
        return "no reply within"
    return "cannot reach the provider" if fault.close else "the provider's answer could not be read"


def test_the_shipped_suite_covers_seed_001s_test_modes_and_every_budget_dimension() -> None:
    suite = load_suite(SUITE)
    assert len(suite.scenarios) >= 40
    assert {scenario.mode for scenario in suite.scenarios} == {"golden", "fault", "budget", "escalation", "replay", "policy", "soak"}
    assert {scenario.mode for scenario in quick_selection(suite).scenarios} == {scenario.mode for scenario in suite.scenarios}
    ended = {scenario.expect.terminal.value for scenario in suite.scenarios}
    assert ended == {code.value for code in Terminal} - {"USER_CANCEL"}  # a cancel needs a person at Ctrl-C (tests/graph covers it)
    stressed = {name for scenario in suite.scenarios if scenario.mode == "budget" for name in scenario.task.budget}
    assert stressed == set(Budget.model_fields) - {"parallel_calls"}  # parallel_calls is a width, not a cap
