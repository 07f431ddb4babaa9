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
from boundloop.graph.evals.provider_server import HttpFault
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
        retried = {run.scenario: [(event["data"]["role"], event["data"]["error"]) for event in await runner.trace(run.thread_id)
                                  if event["kind"] == "model_retry"] for run in outcomes}
    assert {run.scenario: run.problems for run in outcomes if run.problems} == {}
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
