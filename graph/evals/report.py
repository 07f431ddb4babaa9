"""report: one suite run as a document (what `--json` prints and Postgres stores) and as HTML.

The HTML is one fragment shared by `boundloop eval --html` (wrapped in a page with the stylesheet
inline: the file opens anywhere, offline) and the console's Evaluation page (which serves the same
stylesheet from its own origin). Plots are SVG drawn here, no script: per-family bars of model
calls, tokens and wall time, and a line per metric over the earlier runs of the same suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from boundloop.graph.evals.harness import RunOutcome
from boundloop.graph.evals.metrics import Metric, as_json, families, overruns
from boundloop.graph.evals.suite import Bound, Suite

PACKAGE = resources.files("boundloop.graph.evals")
STYLESHEET = (PACKAGE / "report.css").read_text()
TREND_RUNS = 20
"""Earlier runs of the same suite (and selection) the trend draws, the newest last."""
RATES = frozenset({"task_success_rate", "correct_termination", "trajectory_validity", "escalation_precision", "escalation_recall",
                   "retry_rate", "timeout_rate", "budget_adherence", "observation_grounding_rate", "human_override_rate",
                   "trace_completeness", "memory_write_quality"})
FAMILY_PLOTS = (("model_calls", "model calls"), ("tokens", "tokens"), ("seconds", "wall (s)"))
_templates = Environment(loader=FileSystemLoader(str(PACKAGE / "templates")), autoescape=select_autoescape(default=True))


def document(suite: Suite, quick: bool, outcomes: list[RunOutcome], metrics: dict[str, Metric], missed: list[str], seconds: float) -> dict[str, Any]:
    """The run as JSON: each metric with its threshold and whether it is met, families, each scenario run."""
    thresholds = {name: bound.model_dump(exclude_none=True) for name, bound in suite.thresholds.items()}
    measured = as_json(metrics)
    for name, metric in measured.items():
        bound = suite.thresholds.get(name)
        metric["met"] = None if bound is None else _meets(metric["value"], bound)
    return {
        "suite": suite.name,
        "quick": quick,
        "passed": not missed,
        "missed": missed,
        "seconds": round(seconds, 2),
        "metrics": measured,
        "families": families(outcomes),
        "thresholds": thresholds,
        "runs": [{"scenario": run.scenario, "mode": run.mode, "run_id": run.thread_id, "expected": run.expected,
                  "terminal": run.terminal, "steps": len(run.path), "path": run.path, "golden_steps": len(run.golden) if run.golden else None,
                  "escalated": run.escalated, "overruns": overruns(run), "replay_problems": run.replay_problems,
                  "trace_missing": run.trace_missing,
                  "memory": {"promoted": sum(v.promoted for v in run.memory), "rejected": sum(not v.promoted for v in run.memory),
                             "wrong": sum(v.judged and not v.right for v in run.memory)},
                  "grounding": [{"step": v.step_id, "verified": v.verified, **({"why": v.why} if not v.verified else {})} for v in run.grounding],
                  "corrections": run.corrections, "model_calls": run.model_calls, "tokens": run.tokens,
                  "seconds": run.seconds, "problems": run.problems}
                 for run in outcomes],
    }


def _meets(value: float | None, bound: Bound) -> bool:
    return value is not None and (bound.min is None or value >= bound.min) and (bound.max is None or value <= bound.max)


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


def format_bound(name: str, bound: Bound | None) -> str:
    if bound is None:
        return ""
    parts = [f">= {format_value(name, bound.min)}" if bound.min is not None else "", f"<= {format_value(name, bound.max)}" if bound.max is not None else ""]
    return " ".join(part for part in parts if part)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Line:
    """One metric over the stored runs: the polyline's points and a dot per measured run."""

    points: list[tuple[float, float]]
    last: str

    @property
    def polyline(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.points)


BAR_WIDTH, BAR_GAP, PLOT_HEIGHT = 48, 16, 120
TREND_WIDTH, TREND_HEIGHT = 160, 32


def family_bars(document: dict[str, Any]) -> dict[str, list[Bar]]:
    """Per plotted quantity, one bar per family, scaled to the largest; wall time summed from the runs."""
    totals: dict[str, dict[str, float]] = {}
    for run in document["runs"]:
        row = totals.setdefault(run["mode"], {"model_calls": 0, "tokens": 0, "seconds": 0.0})
        for key in row:
            row[key] += run.get(key) or 0
    plots: dict[str, list[Bar]] = {}
    for key, _ in FAMILY_PLOTS:
        top = max((row[key] for row in totals.values()), default=0) or 1
        bars = []
        for index, (mode, row) in enumerate(totals.items()):
            height = PLOT_HEIGHT * row[key] / top
            text = f"{row[key]:.1f}" if key == "seconds" else f"{row[key]:.0f}"
            bars.append(Bar(mode, row[key], text, BAR_GAP + index * (BAR_WIDTH + BAR_GAP), 16 + PLOT_HEIGHT - height, BAR_WIDTH, height))
        plots[key] = bars
    return plots


def trend_lines(history: list[dict[str, Any]]) -> dict[str, Line]:
    """Per metric, its value in each stored run (oldest first), scaled to the metric's own range."""
    lines: dict[str, Line] = {}
    names = dict.fromkeys(name for report in history for name in report["metrics"])
    step = TREND_WIDTH / max(len(history) - 1, 1)
    for name in names:
        values = [(index, report["metrics"].get(name, {}).get("value")) for index, report in enumerate(history)]
        measured = [(index, value) for index, value in values if value is not None]
        if not measured:
            continue
        low, high = min(v for _, v in measured), max(v for _, v in measured)
        span = (high - low) or 1
        points = [(4 + index * step, 4 + (TREND_HEIGHT - 8) * (1 - (value - low) / span if high != low else 0.5)) for index, value in measured]
        lines[name] = Line(points, format_value(name, measured[-1][1]))
    return lines


def fragment(report: dict[str, Any], history: list[dict[str, Any]], started_at: str) -> str:
    """The report's HTML body: `history` is the stored runs of the same suite and selection up to this one, oldest first."""
    thresholds = {name: Bound.model_validate(bound) for name, bound in report["thresholds"].items()}
    return _templates.get_template("report.html").render(
        report=report, started_at=started_at, format_value=format_value, bounds={name: format_bound(name, thresholds.get(name)) for name in report["metrics"]},
        plots=family_bars(report), plot_titles=dict(FAMILY_PLOTS), trend=trend_lines(history), runs_in_trend=len(history),
        plot_height=PLOT_HEIGHT + 40, trend_width=TREND_WIDTH + 8, trend_height=TREND_HEIGHT)


def trend_table(suite: str, history: list[dict[str, Any]]) -> str:
    """Every metric's line over `history` (stored runs of one suite and selection, oldest first)."""
    return _templates.get_template("trend.html").render(suite=suite, trend=trend_lines(history), runs=len(history),
                                                         width=TREND_WIDTH + 8, height=TREND_HEIGHT)


def page(report: dict[str, Any], history: list[dict[str, Any]], started_at: str) -> str:
    """The report as one self-contained HTML file: the stylesheet inline, no script, nothing fetched."""
    return _templates.get_template("page.html").render(report=report, stylesheet=STYLESHEET, body=fragment(report, history, started_at))
