"""`boundloop eval --html`: every run is stored, the report file holds the metrics against their
thresholds, every scenario run, a bar plot per family quantity and the trend over the stored runs;
a path the report cannot be written to is one line and exit 2 before any scenario runs."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from boundloop.checkpoints import open_pool
from boundloop.checkpoints.eval_runs import EvalRun, eval_runs
from boundloop.graph.cli.app import app
from boundloop.graph.core.status import Exit
from boundloop.graph.evals.suite import METRICS
from tests.evals.test_eval_command import SUITE

QUICK_SUITE = {**SUITE, "name": "report-checked", "scenarios": [{**scenario, "quick": True} for scenario in SUITE["scenarios"]]}
"""The hand-checked suite, every scenario in its quick selection: trajectory_efficiency misses its maximum."""


def run_eval(suite: Path, report: Path, db_url: str) -> Any:
    return CliRunner().invoke(app, ["eval", str(suite), "--quick", "--html", str(report), "--database-url", db_url])


async def stored_runs(db_url: str, suite: str) -> list[EvalRun]:
    async with await open_pool(db_url) as pool:
        return await eval_runs(pool, suite=suite)


def row(html: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(value)}"[^>]*>.*?</tr>', html, re.S)
    assert found, f"no row {attribute}={value}"
    return found.group(0)


def test_the_html_report_shows_metrics_scenarios_family_plots_and_the_trend(db_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(QUICK_SUITE))
    first, second = tmp_path / "first.html", tmp_path / "second.html"
    assert run_eval(suite, first, db_url).exit_code == Exit.QUALITY  # the gate still fails; the report is still written
    assert run_eval(suite, second, db_url).exit_code == Exit.QUALITY
    html = second.read_text()

    assert "<script" not in html and "<link" not in html and not re.search(r'\b(src|href)="', html)  # self-contained, nothing fetched
    assert "<style>" in html
    for name in METRICS:
        assert f'data-metric="{name}"' in html
    missed = row(html, "data-metric", "trajectory_efficiency")
    assert 'class="missed"' in missed and ">missed<" in missed and "&lt;= 1.05" in missed
    met = row(html, "data-metric", "correct_termination")
    assert 'class="met"' in met and ">met<" in met
    for scenario, ending in (("read", "SUCCESS"), ("detour", "SUCCESS"), ("denied", "PERMISSION_DENIED")):
        scenario_row = row(html, "data-scenario", scenario)
        assert f'<td class="ending">{ending}</td>' in scenario_row
    assert "intake → plan → validate_plan → act" in row(html, "data-scenario", "read")
    plots = re.findall(r'<svg class="family-plot" data-plot="(\w+)".*?</svg>', html, re.S)
    assert plots == ["model_calls", "tokens", "seconds"]
    for plot in re.findall(r'<svg class="family-plot".*?</svg>', html, re.S):
        assert re.findall(r'data-family="(\w+)"', plot) == ["golden", "fault", "escalation"]
        assert plot.count("<rect") == 3
    assert 'data-points="2"' in row(html, "data-metric", "correct_termination")  # two stored runs of this suite
    assert 'data-points="1"' in row(first.read_text(), "data-metric", "correct_termination")


def test_every_run_is_stored_with_its_metrics_and_scenarios(db_url: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(QUICK_SUITE))
    done = CliRunner().invoke(app, ["eval", str(suite), "--quick", "--json", "--database-url", db_url])
    assert done.exit_code == Exit.QUALITY
    [stored] = asyncio.run(stored_runs(db_url, "report-checked"))
    assert stored.quick and not stored.passed
    assert stored.report == json.loads(done.stdout)
    assert stored.report["metrics"]["trajectory_efficiency"]["met"] is False
    assert stored.report["metrics"]["correct_termination"]["met"] is True
    assert [run["path"][0] for run in stored.report["runs"]] == ["intake"] * 3


@pytest.mark.parametrize("where", ["missing/report.html", "."])
def test_a_report_path_that_cannot_be_written_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path, where: str) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(QUICK_SUITE))
    target = tmp_path / where
    done = CliRunner().invoke(app, ["eval", str(suite), "--html", str(target), "--database-url", "postgresql://127.0.0.1:1/none"])
    assert done.exit_code == Exit.BAD_INPUT
    [line] = done.output.strip().splitlines()
    reason = "does not exist" if where.startswith("missing") else "is a directory"
    assert line.startswith(f"error: --html '{target}'") and reason in line
