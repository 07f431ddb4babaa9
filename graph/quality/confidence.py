"""confidence: how far a result can be trusted, from several signals, and whether a human must see it.

Confidence could combine features f_j with learned weights. With no labelled runs to learn from,
the weights here are fixed and documented, and the combination is a weighted mean over the signals
that apply to the run (a run with no tests is not marked down for having none), less a penalty per
repair:

    confidence = Σ w_j·f_j / Σ w_j  (over the signals present)  −  0.05 × repairs, clamped to [0, 1]

| signal | weight | value |
|---|---|---|
| critic | 0.35 | the critic's weighted rubric score |
| verification | 0.25 | 1 passed, 0.5 undecided (the judge gave no verdict), 0 failed |
| tests | 0.20 | share of tests passed over the run's test checks (absent: no test ran) |
| evidence | 0.10 | share of the output's checkable claims found in the run's observations (absent: none) |
| consistency | 0.10 | share of judge samples agreeing with the majority (absent: one sample) |

The disposition: at or above `commit_threshold` the result commits — unless
an approval trigger holds, which sends it to review however high the score: an irreversible side
effect no human approved (with `review_unapproved_irreversible`, off by default: the gate's policy
already decides which irreversible calls need a human before they run), a safety score below `safety_review_below`, or a task flagged as needing
approval. (A budget exceeded with partial output is not a trigger here: it is the budget-extension
escalation, which happens before commit.)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from collections.abc import Mapping
from typing import Any

from boundloop.graph.quality.test_results import pass_rate

WEIGHTS = {"critic": 0.35, "verification": 0.25, "tests": 0.20, "evidence": 0.10, "consistency": 0.10}
REPAIR_PENALTY = 0.05
"""Confidence lost per repair pass: an output that needed repairs is trusted a little less."""
VERDICT_VALUE = {True: 1.0, None: 0.5, False: 0.0}

# A claim is checkable when it states a datum: a number, a quoted string, or a path-like name.
_DATUM = re.compile(r"\"[^\"\n]{2,80}\"|'[^'\n]{2,80}'|`[^`\n]{2,80}`|\b[\w.-]+/[\w./-]+|\b\w+\.\w{1,5}\b|-?\d[\d,]*(?:\.\d+)?%?")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class Signals:
    critic: float | None
    verification: float | None
    tests: float | None
    evidence: float | None
    consistency: float | None
    repairs: int


def estimate(signals: Signals) -> float:
    """The documented combination above, rounded to 4 places."""
    present = {name: value for name, value in asdict(signals).items() if name in WEIGHTS and value is not None}
    if not present:
        return 0.0
    mean = sum(WEIGHTS[name] * value for name, value in present.items()) / sum(WEIGHTS[name] for name in present)
    return round(min(max(mean - REPAIR_PENALTY * signals.repairs, 0.0), 1.0), 4)


def signals_of(state: Mapping[str, Any]) -> Signals:
    quality = state.get("quality") or {}
    verification = quality.get("verification", {})
    critique = quality.get("critique", {})
    verdict = None if verification.get("undecided") else verification.get("passed")
    return Signals(
        critic=critique.get("weighted") if critique.get("scores") else None,
        verification=VERDICT_VALUE[verdict] if verification else None,
        tests=pass_rate(verification.get("tests")),
        evidence=evidence_coverage(verification.get("output", ""), state.get("observations", [])),
        consistency=verification.get("consistency"),
        repairs=len(quality.get("repairs", [])),
    )


def evidence_coverage(output: str, observations: list[dict[str, Any]]) -> float | None:
    """Share of the output's checkable claims whose every datum appears in a successful observation.

    A lexical proxy for "claims grounded in verified observations": it cannot tell a paraphrase
    from an invention, so it only reads claims that carry data (numbers, quoted text, names of
    files and paths). None when the output makes no such claim.
    """
    seen = "\n".join(obs.get("excerpt", "") for obs in observations if obs.get("status") == "ok").casefold()
    claims = [data for sentence in _SENTENCE.split(output) if (data := [match.strip("\"'`") for match in _DATUM.findall(sentence)])]
    if not claims:
        return None
    grounded = sum(all(datum.casefold() in seen for datum in data) for data in claims)
    return round(grounded / len(claims), 4)


def review_triggers(state: Mapping[str, Any]) -> list[str]:
    """Why a human must see the result whatever its confidence (empty: nothing requires it)."""
    settings, quality = state["settings"], state.get("quality") or {}
    approved = {record["call_id"] for record in state.get("approvals", []) if record.get("run")}
    unapproved = sorted({
        obs["tool"] for obs in state.get("observations", [])
        if obs.get("reversibility") == "irreversible" and obs.get("phase") != "verify"
        and obs.get("status") == "ok" and obs["call_id"] not in approved
    })
    triggers = []
    if unapproved and settings.get("review_unapproved_irreversible"):
        triggers.append("irreversible effects no human approved: " + ", ".join(unapproved))
    safety = quality.get("critique", {}).get("scores", {}).get("safety")
    if safety is not None and safety < settings.get("safety_review_below", 0.98):
        triggers.append(f"safety score {safety} is below {settings.get('safety_review_below', 0.98)}")
    if state["task"].get("require_result_approval"):
        triggers.append("the task asks for the result to be approved")
    return triggers
