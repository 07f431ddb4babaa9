"""The shipped evaluation suite (graph/evals/default.json) as CI's regression gate.

The default test suite runs its `quick` scenarios (one or more per test mode); with
BOUNDLOOP_EVAL_FULL=1 it runs all of them (graph/evals/README.md).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from boundloop.graph.core.budget import Budget
from boundloop.graph.evals.harness import run_suite
from boundloop.graph.evals.metrics import compute, misses
from boundloop.graph.evals.suite import load_suite, quick_selection
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


def test_the_shipped_suite_covers_seed_001s_test_modes_and_every_budget_dimension() -> None:
    suite = load_suite(SUITE)
    assert len(suite.scenarios) >= 40
    assert {scenario.mode for scenario in suite.scenarios} == {"golden", "fault", "budget", "escalation", "replay", "policy", "soak"}
    assert {scenario.mode for scenario in quick_selection(suite).scenarios} == {scenario.mode for scenario in suite.scenarios}
    ended = {scenario.expect.terminal.value for scenario in suite.scenarios}
    assert ended == {code.value for code in Terminal} - {"USER_CANCEL"}  # a cancel needs a person at Ctrl-C (tests/graph covers it)
    stressed = {name for scenario in suite.scenarios if scenario.mode == "budget" for name in scenario.task.budget}
    assert stressed == set(Budget.model_fields) - {"parallel_calls"}  # parallel_calls is a width, not a cap
