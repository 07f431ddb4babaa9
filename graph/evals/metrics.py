"""metrics: the evaluation metrics (success, termination, trajectory, escalation, budget, grounding, trace, memory) over a suite's runs, and the suite's thresholds on them.

Each metric is a value with the counts behind it ("38/40"), or None — not measured — when no run
gives it a denominator. A threshold on an unmeasured metric is missed: a gate never passes on a
number nobody measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from boundloop.graph.evals.harness import RunOutcome
from boundloop.graph.evals.suite import Bound

SUCCESS_CODES = frozenset({"SUCCESS", "PARTIAL_SUCCESS"})
PER_TOOL_LIMITS = {"tool_calls_per_tool": "per_tool", "tool_calls_per_server": "per_server"}
NOT_CAPS = frozenset({"parallel_calls"})
"""Budget fields that are not a cap on something spent."""


@dataclass
class Metric:
    name: str
    value: float | None
    detail: str
    """The counts behind the value, or why it is not measured."""


def compute(outcomes: list[RunOutcome]) -> dict[str, Metric]:
    runs = len(outcomes)
    found: list[Metric] = []

    def ratio(name: str, hits: int, total: int, what: str) -> None:
        found.append(Metric(name, hits / total if total else None, f"{hits}/{total} {what}" if total else f"no {what}"))

    expecting_success = [run for run in outcomes if run.expected in SUCCESS_CODES]
    ratio("task_success_rate", sum(run.terminal in SUCCESS_CODES for run in expecting_success), len(expecting_success), "runs expected to succeed")
    ratio("correct_termination", sum(run.terminal == run.expected for run in outcomes), runs, "runs")
    replayed = [run for run in outcomes if run.replay_valid is not None]
    ratio("trajectory_validity", sum(bool(run.replay_valid) for run in replayed), len(replayed), "runs valid on replay against the graph")
    golden = [run for run in outcomes if run.golden]
    steps, reference = sum(len(run.path) for run in golden), sum(len(run.golden or []) for run in golden)
    found.append(Metric("trajectory_efficiency", steps / reference if reference else None,
                        f"{steps} steps / {reference} golden steps over {len(golden)} runs" if golden else "no golden paths"))
    true_positive = sum(run.escalated and run.expected_escalation for run in outcomes)
    flagged, anomalies = sum(run.escalated for run in outcomes), sum(run.expected_escalation for run in outcomes)
    ratio("escalation_precision", true_positive, flagged, "escalations on an injected anomaly")
    ratio("escalation_recall", true_positive, anomalies, "injected anomalies escalated")
    calls = [obs for run in outcomes for obs in run.observations]
    found.append(Metric("tool_calls_per_run", len(calls) / runs if runs else None, f"{len(calls)} calls over {runs} runs"))
    failed = sum(obs.get("status") not in ("ok", "pending") for obs in calls)
    found.append(Metric("failed_tool_calls", float(failed), f"{failed} of {len(calls)} calls did not end ok"))
    dispatched = [obs for obs in calls if obs.get("attempts")]
    retries = sum(max(int(obs["attempts"]) - 1, 0) for obs in dispatched)
    ratio("retry_rate", retries, sum(int(obs["attempts"]) for obs in dispatched), "tool dispatches were retries")
    ratio("timeout_rate", sum(_timed_out(run) for run in outcomes), runs, "runs hit a timeout")
    ratio("budget_adherence", sum(not overruns(run) for run in outcomes), runs, "runs within every hard cap")
    successes = sum(run.terminal in SUCCESS_CODES for run in outcomes)
    spent = sum(float(run.usage.get("cost_usd") or 0) for run in outcomes)
    found.append(Metric("cost_per_success", spent / successes if successes else None, f"${spent:.4f} over {successes} successes"))
    updates = [verdict for run in outcomes for verdict in run.grounding]
    ratio("observation_grounding_rate", sum(verdict.verified for verdict in updates), len(updates),
          "tool steps done on calls their recorded results, the ledger and the workspace confirm")
    decided = [record for run in outcomes for record in run.approvals if record.get("decision")]
    ratio("human_override_rate", sum(record["decision"] != "approve" for record in decided), len(decided), "decisions overrode the proposed call")
    ended = [run for run in outcomes if run.trace_missing is not None and not run.waiting]  # a waiting run has no terminal code yet
    ratio("trace_completeness", sum(not run.trace_missing for run in ended), len(ended), "ended runs with every trace field")
    judged = [verdict for run in outcomes for verdict in run.memory if verdict.judged]
    unlabelled = sum(verdict.supported is None for run in outcomes for verdict in run.memory)
    ratio("memory_write_quality", sum(verdict.right for verdict in judged), len(judged),
          "labelled memory candidates the write gate decided as labelled" + (f" ({unlabelled} unlabelled, not judged)" if unlabelled else ""))
    steps = sum(len(run.path) for run in outcomes)
    found.append(Metric("step_count_efficiency", steps / runs if runs else None, f"{steps} steps over {runs} runs (average steps per run)"))
    deepest = max(outcomes, key=loop_depth, default=None)
    found.append(Metric("loop_depth", float(loop_depth(deepest)) if deepest else None,
                        f"deepest: {deepest.scenario}, {loop_depth(deepest)} rounds back into the loop (repairs and re-plans)" if deepest else "no runs"))
    ratio("user_correction_rate", sum(run.corrections for run in outcomes), runs, "corrections by a person per run")
    found += per_success("model_calls_per_success", "model calls", outcomes, lambda run: run.model_calls)
    found += per_success("tokens_per_success", "tokens", outcomes, lambda run: run.tokens)
    return {metric.name: metric for metric in found}


def loop_depth(run: RunOutcome | None) -> int:
    """Rounds a run went back into its loop: each repair, each plan after the first. A run spawns
    no child runs, so this is the depth of its own corrective nesting."""
    if run is None:
        return 0
    return run.path.count("repair") + max(run.path.count("plan") - 1, 0)


def per_success(name: str, what: str, outcomes: list[RunOutcome], spent: Callable[[RunOutcome], int]) -> list[Metric]:
    """All runs' spend of `what` over their successes (failures' spend included: it is what a success costs)."""
    successes = sum(run.terminal in SUCCESS_CODES for run in outcomes)
    total = sum(spent(run) for run in outcomes)
    return [Metric(name, total / successes if successes else None, f"{total} {what} over {successes} successes")]


def families(outcomes: list[RunOutcome]) -> dict[str, dict[str, Any]]:
    """Per test mode: runs, successes, model calls and tokens per success (None without a success)."""
    table: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(run.mode for run in outcomes):
        runs = [run for run in outcomes if run.mode == mode]
        successes = sum(run.terminal in SUCCESS_CODES for run in runs)
        calls, tokens = sum(run.model_calls for run in runs), sum(run.tokens for run in runs)
        table[mode] = {"runs": len(runs), "successes": successes, "model_calls": calls, "tokens": tokens,
                       "model_calls_per_success": calls / successes if successes else None,
                       "tokens_per_success": tokens / successes if successes else None}
    return table


def misses(metrics: dict[str, Metric], thresholds: dict[str, Bound]) -> list[str]:
    """One line per threshold the metrics miss."""
    lines = []
    for name, bound in thresholds.items():
        value = metrics[name].value
        if value is None:
            lines.append(f"{name} is not measured ({metrics[name].detail}) but the suite sets a threshold on it")
        elif bound.min is not None and value < bound.min:
            lines.append(f"{name} = {value:.4g} is below its minimum {bound.min:g}")
        elif bound.max is not None and value > bound.max:
            lines.append(f"{name} = {value:.4g} is above its maximum {bound.max:g}")
    return lines


def run_misses(outcomes: list[RunOutcome]) -> list[str]:
    """One line per way a run misses its scenario (ending, golden path, replay), naming the scenario
    (and the run, for a scenario run more than once)."""
    runs_of: dict[str, int] = {}
    for run in outcomes:
        runs_of[run.scenario] = runs_of.get(run.scenario, 0) + 1
    seen: dict[str, int] = {}
    lines: list[str] = []
    for run in outcomes:
        seen[run.scenario] = seen.get(run.scenario, 0) + 1
        label = run.scenario if runs_of[run.scenario] == 1 else f"{run.scenario} (run {seen[run.scenario]} of {runs_of[run.scenario]})"
        lines.extend(f"scenario {label}: {problem}" for problem in run.problems)
    return lines


def _timed_out(run: RunOutcome) -> bool:
    return run.terminal == "TIMEOUT" or any(obs.get("status") == "timeout" for obs in run.observations)


def overruns(run: RunOutcome) -> list[str]:
    """Budget dimensions whose use went past the run's limit."""
    over = []
    for dimension, limit in run.budget.items():
        if limit is None or dimension in NOT_CAPS:
            continue
        if dimension in PER_TOOL_LIMITS:
            used: float = max((run.usage.get(PER_TOOL_LIMITS[dimension]) or {}).values(), default=0)
        else:
            used = float(run.usage.get(dimension) or 0)
        if used > limit:
            over.append(dimension)
    return over


def as_json(metrics: dict[str, Metric]) -> dict[str, Any]:
    return {name: {"value": metric.value, "detail": metric.detail} for name, metric in metrics.items()}
