"""The console's Evaluation page in a real headless Chromium, after two stored runs of one suite:
the list with each run's verdict and the suite's trend, and one run's report — its metrics against
the thresholds, its scenario rows, the per-family plots and the trend over both runs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from boundloop.graph.core.status import Exit
from tests.console.conftest import LiveConsole
from tests.evals.test_eval_report import QUICK_SUITE

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")


@pytest.fixture(scope="module")
def two_suite_runs(live_console: LiveConsole, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Two `boundloop eval --quick` runs of the report-checked suite, stored in the console's database."""
    suite = tmp_path_factory.mktemp("suite") / "suite.json"
    suite.write_text(json.dumps(QUICK_SUITE))
    command = [BOUNDLOOP, "eval", str(suite), "--quick", "--database-url", str(live_console.app.state.console.settings.database_url)]
    for _ in range(2):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == Exit.QUALITY, done.stderr
    yield


def test_the_evaluation_page_lists_stored_runs_and_opens_one_report(page: Page, live_console: LiveConsole, two_suite_runs: None):
    page.goto(f"{live_console.url}/console/")
    page.get_by_role("link", name="Evaluation").click()
    expect(page.locator("h1")).to_have_text("Evaluation")
    rows = page.locator("table.eval-runs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first.locator(".verdict")).to_have_text("failed")
    expect(page.locator("table.trend-table tr[data-metric='correct_termination'] svg.trend circle.point")).to_have_count(2)

    rows.first.locator("a").click()
    metrics = page.locator("table.metrics")
    expect(metrics.locator("tr[data-metric='trajectory_efficiency'] .verdict")).to_have_text("missed")
    expect(metrics.locator("tr[data-metric='correct_termination'] .verdict")).to_have_text("met")
    expect(metrics.locator("tr[data-metric='correct_termination'] td").nth(1)).to_have_text("100%")
    denied = page.locator("table.scenarios tr[data-scenario='denied']")
    expect(denied.locator(".ending")).to_have_text("PERMISSION_DENIED")
    expect(denied.locator(".trajectory")).to_contain_text("intake → plan")
    for plot in ("model_calls", "tokens", "seconds"):
        bars = page.locator(f"svg.family-plot[data-plot='{plot}'] g.bar rect")
        expect(bars).to_have_count(3)
        assert all(box and box["height"] > 0 for box in (bars.nth(i).bounding_box() for i in range(3)))  # drawn, not just present
    expect(metrics.locator("tr[data-metric='correct_termination'] svg.trend circle.point")).to_have_count(2)
    assert page.locator("svg.trend").first.bounding_box()["width"] > 0
