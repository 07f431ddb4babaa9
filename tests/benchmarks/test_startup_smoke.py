"""The start-up benchmark still runs: one run of each system from a new process, its stamps in
order (first model request, then first tool call, then exit) and boundloop's intake step read
from its trace; figures unchecked."""

from __future__ import annotations

from tests.benchmarks.startup import run_once


def test_each_system_runs_once_from_a_new_process_and_is_stamped_in_order(db_url: str) -> None:
    for system in ("boundloop", "create_agent"):
        times = run_once(system, db_url, latency_s=0.0)
        assert 0 < times.first_model < times.first_tool < times.exit, (system, times)
        assert (times.intake is not None) == (system == "boundloop")
