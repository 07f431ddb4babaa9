"""The shipped suite's golden and fault families through the provider path: each scenario's script
served by the local OpenAI-compatible script server (graph/evals/provider_server.py), the runs
pointed at it by model name, base URL and a config file's key, as a user points a run at a provider.

The default test suite runs their quick selection; with BOUNDLOOP_EVAL_FULL=1 all of them.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from boundloop.graph.evals.harness import run_suite
from boundloop.graph.evals.suite import load_suite, provider_selection, quick_selection
from boundloop.graph.run.runner import Runner

SUITE = Path(str(resources.files("graph") / "evals" / "default.json"))
FULL = os.environ.get("BOUNDLOOP_EVAL_FULL") == "1"


async def test_the_golden_and_fault_families_meet_their_expectations_over_http(db_url: str) -> None:
    suite = load_suite(SUITE)
    chosen = provider_selection(suite if FULL else quick_selection(suite))
    assert {scenario.mode for scenario in chosen.scenarios} == {"golden", "fault"}
    async with Runner(db_url) as runner:
        outcomes = await run_suite(runner, chosen, provider="http")
    assert {run.scenario: run.problems for run in outcomes if run.problems} == {}
