"""The start-up benchmark still runs: runs of each system from a new process, in a new workspace
and again in the same one, their stamps in order (first model request, then first tool call, then
exit) and boundloop's intake step read from its trace; figures unchecked."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.startup import run_once


def test_each_system_runs_from_a_new_process_and_is_stamped_in_order(db_url: str, tmp_path: Path) -> None:
    for system in ("boundloop", "create_agent"):
        (tmp_path / system).mkdir()
        for _ in range(2):  # the second run in the same workspace: boundloop's listing is kept
            times = run_once(system, db_url, latency_s=0.0, directory=tmp_path / system)
            assert 0 < times.first_model < times.first_tool < times.exit, (system, times)
            assert (times.intake is not None) == (system == "boundloop")
