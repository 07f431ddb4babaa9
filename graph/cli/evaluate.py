"""evaluate: what `boundloop eval` does once its flags are checked — run the suite through the
harness, compute its metrics, store the run, write the `--html` report, and print the table, JSON
or Markdown. Kept apart from the command (graph/cli/eval.py) so that only `eval` loads the harness.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.table import Table

from boundloop.checkpoints.eval_runs import eval_runs, save_eval_run
from boundloop.graph.cli.running import err, out, with_runner
from boundloop.graph.evals import Provider
from boundloop.graph.evals.harness import RunOutcome, run_suite
from boundloop.graph.evals.metrics import Metric, compute, families, misses, run_misses
from boundloop.graph.evals.report import TREND_RUNS, document, format_bound, format_value, page
from boundloop.graph.evals.suite import Bound, Suite, load_suite, provider_selection, quick_selection
from boundloop.graph.run.runner import Runner


def evaluate(suite_file: Path, *, quick: bool, provider: Provider, html: Path | None, as_json: bool, markdown: bool,
             database_url: str | None) -> list[str]:
    """Run the suite and print its report; the misses, one line each (none: the gate passes)."""
    missed: list[str] = []
    suite = quick_selection(load_suite(suite_file)) if quick else load_suite(suite_file)
    if provider == "http":
        suite = provider_selection(suite)

    async def body(runner: Runner) -> None:
        started, started_at = time.monotonic(), datetime.now(timezone.utc)
        outcomes = await run_suite(runner, suite, provider)
        metrics = compute(outcomes)
        missed.extend(run_misses(outcomes) + misses(metrics, suite.thresholds))
        seconds = time.monotonic() - started
        report = document(suite, quick, outcomes, metrics, missed, seconds)
        stored = await save_eval_run(runner.pool, suite=suite.name, quick=quick, started_at=started_at, seconds=seconds,
                                     passed=not missed, report=report)
        if html is not None:
            history = await eval_runs(runner.pool, suite=suite.name, quick=quick, upto=stored.id, limit=TREND_RUNS)
            html.write_text(page(report, [run.report for run in reversed(history)], f"{started_at:%Y-%m-%d %H:%M:%S} UTC"))
        if as_json:
            out.print_json(json.dumps(report))
        elif markdown:
            print(markdown_table(suite, outcomes, metrics))
        else:
            _render(suite, outcomes, metrics, missed, seconds)
        for line in missed:  # in every output form, on stderr: stdout stays the table, JSON or Markdown
            err.print(f"[bold red]missed:[/bold red] {line}", highlight=False, soft_wrap=True)

    with_runner(database_url, body)
    return missed


def _render(suite: Suite, outcomes: list[RunOutcome], metrics: dict[str, Metric], missed: list[str], seconds: float) -> None:
    runs = Table(title=f"{suite.name}: {len(outcomes)} runs of {len(suite.scenarios)} scenarios in {seconds:.1f} s")
    for column in ("scenario", "mode", "expected", "ended", "steps", "ok"):
        runs.add_column(column)
    for run in outcomes:
        steps = f"{len(run.path)}/{len(run.golden)}" if run.golden else str(len(run.path))
        verdict = "[green]✓[/green]" if not run.problems else "[red]✗ " + "; ".join(run.problems) + "[/red]"
        runs.add_row(run.scenario, run.mode, run.expected, run.terminal, steps, verdict)
    out.print(runs)
    out.print(metrics_table(metrics, suite.thresholds))
    out.print(families_table(outcomes))
    if not missed:
        out.print(f"[green]every run as expected ({len(outcomes)}), every threshold met ({len(suite.thresholds)})[/green]")


def metrics_table(metrics: dict[str, Metric], thresholds: dict[str, Bound]) -> Table:
    table = Table(title="evaluation metrics")
    for column in ("metric", "value", "threshold", "measured from"):
        table.add_column(column)
    for name, metric in metrics.items():
        table.add_row(name, format_value(name, metric.value), format_bound(name, thresholds.get(name)), metric.detail)
    return table


def families_table(outcomes: list[RunOutcome]) -> Table:
    """Model calls and tokens per success, per test mode (failures' spend counted against successes)."""
    table = Table(title="per family")
    for column in ("family", "runs", "successes", "model calls / success", "tokens / success"):
        table.add_column(column)
    for mode, row in families(outcomes).items():
        table.add_row(mode, str(row["runs"]), str(row["successes"]), _per(row["model_calls_per_success"]), _per(row["tokens_per_success"]))
    return table


def _per(value: float | None) -> str:
    return "no success" if value is None else f"{value:.1f}"


def markdown_table(suite: Suite, outcomes: list[RunOutcome], metrics: dict[str, Metric]) -> str:
    modes = {mode: sum(run.mode == mode for run in outcomes) for mode in dict.fromkeys(run.mode for run in outcomes)}
    lines = [f"{len(outcomes)} runs of {len(suite.scenarios)} scenarios (" + ", ".join(f"{mode} {count}" for mode, count in modes.items()) + ")",
             "", "| metric | value | threshold | measured from |", "|---|---|---|---|"]
    for name, metric in metrics.items():
        lines.append(f"| {name} | {format_value(name, metric.value)} | {format_bound(name, suite.thresholds.get(name))} | {metric.detail} |")
    lines += ["", "| family | runs | successes | model calls / success | tokens / success |", "|---|---|---|---|---|"]
    for mode, row in families(outcomes).items():
        lines.append(f"| {mode} | {row['runs']} | {row['successes']} | {_per(row['model_calls_per_success'])} | {_per(row['tokens_per_success'])} |")
    return "\n".join(lines)
