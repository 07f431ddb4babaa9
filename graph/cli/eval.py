"""cli_eval: `boundloop eval SUITE`, the evaluation metrics (graph/evals/metrics.py) over a suite of scenarios.

`--provider http` runs the suite's golden and fault families through the provider path instead
(graph/evals/provider_server.py); its stored runs are under the suite's name marked `(provider http)`.

Exit codes: 0 every run as its scenario expects and every threshold met; 5 any miss — a threshold,
an expected ending, a golden-path deviation, a replay that differed or is not valid — each printed
on its own line (a CI regression gate; the result-quality code of graph/core/status.py); 2 the
suite file, the `--html` path or the database cannot be used (a bad `--html` path is refused before
any scenario runs). Every run is stored (checkpoints/eval_runs.py) whatever the exit code, and the
`--html` report is written even when the gate fails. Registered on the main `boundloop` app by importing
this module (graph/cli/app.py does).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from boundloop.checkpoints.eval_runs import eval_runs, save_eval_run
from boundloop.graph.cli.app import DbFlag, JsonFlag, app
from boundloop.graph.cli.running import err, guarded, out, with_runner
from boundloop.graph.core.status import Exit
from boundloop.graph.evals.harness import Provider, RunOutcome, run_suite
from boundloop.graph.evals.metrics import Metric, compute, families, misses, run_misses
from boundloop.graph.evals.report import TREND_RUNS, document, format_bound, format_value, page
from boundloop.graph.evals.suite import Bound, Suite, load_suite, provider_selection, quick_selection
from boundloop.graph.run.runner import Runner

@app.command("eval")
def eval_suite(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="Suite JSON file, e.g. graph/evals/default.json.")],
    quick: Annotated[bool, typer.Option("--quick", help="Run only the scenarios the suite marks `quick`.")] = False,
    as_json_flag: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the metrics as a Markdown table (the README's).")] = False,
    html: Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Also write the report (metrics, scenarios, plots, trend) "
                                                                            "as one self-contained HTML file.")] = None,
    provider: Annotated[Provider, typer.Option("--provider", help="How scripted scenarios reach their model: `scripted` (in process) or "
                                                                  "`http` (the golden and fault families only, each script served by a local "
                                                                  "OpenAI-compatible server, with its transport faults).")] = "scripted",
    database_url: DbFlag = None,
) -> None:
    """Run a suite of scenarios and print the evaluation metrics; exit 5 on any miss (a threshold, an ending, a golden path, a replay).
    Every run is stored in the database: the console's Evaluation page and the report's trend read it."""
    missed: list[str] = []
    if html is not None and (problem := unwritable(html)):
        err.print(f"[bold red]error:[/bold red] --html {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(Exit.BAD_INPUT)

    def action() -> None:
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
            if as_json_flag:
                out.print_json(json.dumps(report))
            elif markdown:
                print(markdown_table(suite, outcomes, metrics))
            else:
                _render(suite, outcomes, metrics, missed, seconds)
            for line in missed:  # in every output form, on stderr: stdout stays the table, JSON or Markdown
                err.print(f"[bold red]missed:[/bold red] {line}", highlight=False, soft_wrap=True)

        with_runner(database_url, body)

    guarded(action)
    if missed:
        raise typer.Exit(Exit.QUALITY)


def unwritable(file: Path) -> str | None:
    """Why the report cannot be written to `file` (checked before any scenario runs), or None."""
    folder = file.parent
    if file.is_dir():
        return f"{str(file)!r} is a directory; give a file path, e.g. {str(file / 'report.html')!r}"
    if not folder.is_dir():
        return f"{str(file)!r}: the directory {str(folder)!r} does not exist; create it or give a path in an existing directory"
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        return f"{str(file)!r} is not writable; give a path you can write to"
    return None


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
