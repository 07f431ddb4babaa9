"""convergence: the quality score of each repair iteration, the best output so far, and stall detection
(the quality score is measured per iteration; diminishing returns stop the loop early).

    score = 0.5 × critic + 0.5 × verification

where critic is the critic's weighted rubric score (0 when it gave none) and verification is 1 when
it passed, else the share of tests passed when tests ran, else 0. A repair that fixes one of three
failing tests is progress even when the critic does not move.

The loop has stalled when the last `window` iterations did not beat the best score before them by
more than MIN_GAIN: spending more repairs of the same kind is not converging.
"""

from __future__ import annotations

from typing import Any

from boundloop.graph.core.records import Quality
from boundloop.graph.quality.test_results import pass_rate

MIN_GAIN = 0.005
"""Smaller score gains are noise, not progress."""


def quality_score(verification: dict[str, Any], critique: dict[str, Any]) -> float:
    critic = float(critique.get("weighted") or 0.0) if critique.get("scores") else 0.0
    verified = 1.0 if verification.get("passed") else (pass_rate(verification.get("tests")) or 0.0)
    return round(0.5 * critic + 0.5 * verified, 4)


def record(quality: Quality, *, iteration: int, turn: int) -> Quality:
    """`quality` with this iteration's score appended to its history, and the best output kept (ties go
    to the newer output)."""
    verification = quality.get("verification", {})
    score = quality_score(verification, quality.get("critique", {}))
    history = [*quality.get("scores", []), {"iteration": iteration, "turn": turn, "score": score}]
    best = quality.get("best")
    if best is None or score >= best["score"]:
        best = {"iteration": iteration, "score": score, "output": verification.get("output", "")}
    return {**quality, "scores": history, "best": best}


def stalled(history: list[dict[str, Any]], window: int) -> bool:
    """No iteration among the last `window` improved on the best before them (window 0: never)."""
    if window <= 0 or len(history) <= window:
        return False
    before = max(entry["score"] for entry in history[:-window])
    return all(entry["score"] <= before + MIN_GAIN for entry in history[-window:])
