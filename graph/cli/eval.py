"""cli_eval: `boundloop eval SUITE`, the evaluation metrics (graph/evals/metrics.py) over a suite of scenarios.

Exit codes: 0 every run as its scenario expects and every threshold met; 5 any miss — a threshold,
an expected ending, a golden-path deviation, a replay that differed or is not valid — each printed
on its own line (a CI regression gate; the result-quality code of graph/core/status.py); 2 the
suite file or the database cannot be used. Registered on the main `boundloop` app by importing
this module (graph/cli/app.py does).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from boundloop.graph.cli.app import DbFlag, JsonFlag, app
from boundloop.graph.cli.running import err, guarded, out, with_runner
from boundloop.graph.core.status import Exit
from boundloop.graph.evals.harness import RunOutcome, run_suite
from boundloop.graph.evals.metrics import Metric, as_json, compute, families, misses, overruns, run_misses
from boundloop.graph.evals.suite import Bound, Suite, load_suite, quick_selection
from boundloop.graph.run.runner import Runner

RATES = frozenset({"task_success_rate", "correct_termination", "trajectory_validity", "escalation_precision", "escalation_recall",
                   "retry_rate", "timeout_rate", "budget_adherence", "observation_grounding_rate", "human_override_rate",
                   "trace_completeness", "memory_write_quality"})


@app.command("eval")
def eval_suite(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="Suite JSON file, e.g. graph/evals/default.json.")],
    quick: Annotated[bool, typer.Option("--quick", help="Run only the scenarios the suite marks `quick`.")] = False,
    as_json_flag: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the metrics as a Markdown table (the README's).")] = False,
    database_url: DbFlag = None,
) -> None:
    """Run a suite of scenarios and print the evaluation metrics; exit 5 on any miss (a threshold, an ending, a golden path, a replay)."""
    missed: list[str] = []

    def action() -> None:
        suite = quick_selection(load_suite(suite_file)) if quick else load_suite(suite_file)

        async def body(runner: Runner) -> None:
            started = time.monotonic()
            outcomes = await run_suite(runner, suite)
            metrics = compute(outcomes)
            missed.extend(run_misses(outcomes) + misses(metrics, suite.thresholds))
            seconds = time.monotonic() - started
            if as_json_flag:
                out.print_json(json.dumps(_document(suite, outcomes, metrics, missed, seconds)))
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


def _document(suite: Suite, outcomes: list[RunOutcome], metrics: dict[str, Metric], missed: list[str], seconds: float) -> dict[str, Any]:
    return {
        "suite": suite.name,
        "passed": not missed,
        "missed": missed,
        "seconds": round(seconds, 2),
        "metrics": as_json(metrics),
        "families": families(outcomes),
        "thresholds": {name: bound.model_dump(exclude_none=True) for name, bound in suite.thresholds.items()},
        "runs": [{"scenario": run.scenario, "mode": run.mode, "run_id": run.thread_id, "expected": run.expected,
                  "terminal": run.terminal, "steps": len(run.path), "golden_steps": len(run.golden) if run.golden else None,
                  "escalated": run.escalated, "overruns": overruns(run), "replay_problems": run.replay_problems,
                  "trace_missing": run.trace_missing,
                  "memory": {"promoted": sum(v.promoted for v in run.memory), "rejected": sum(not v.promoted for v in run.memory),
                             "wrong": sum(v.judged and not v.right for v in run.memory)},
                  "grounding": [{"step": v.step_id, "verified": v.verified, **({"why": v.why} if not v.verified else {})} for v in run.grounding],
                  "corrections": run.corrections, "model_calls": run.model_calls, "tokens": run.tokens,
                  "seconds": run.seconds, "problems": run.problems}
                 for run in outcomes],
    }


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
        table.add_row(name, format_value(name, metric.value), _bound(name, thresholds.get(name)), metric.detail)
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
        lines.append(f"| {name} | {format_value(name, metric.value)} | {_bound(name, suite.thresholds.get(name))} | {metric.detail} |")
    lines += ["", "| family | runs | successes | model calls / success | tokens / success |", "|---|---|---|---|---|"]
    for mode, row in families(outcomes).items():
        lines.append(f"| {mode} | {row['runs']} | {row['successes']} | {_per(row['model_calls_per_success'])} | {_per(row['tokens_per_success'])} |")
    return "\n".join(lines)


def format_value(name: str, value: float | None) -> str:
    if value is None:
        return "not measured"
    if name in RATES:
        return f"{value:.0%}" if value in (0, 1) else f"{value:.1%}"
    if name == "cost_per_success":
        return f"${value:.4f}"
    if name in ("step_count_efficiency", "model_calls_per_success", "tokens_per_success"):
        return f"{value:.1f}"
    return f"{value:.3g}"


def _bound(name: str, bound: Bound | None) -> str:
    if bound is None:
        return ""
    parts = [f">= {format_value(name, bound.min)}" if bound.min is not None else "", f"<= {format_value(name, bound.max)}" if bound.max is not None else ""]
    return " ".join(part for part in parts if part)
