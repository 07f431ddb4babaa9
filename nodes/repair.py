"""repair: diagnose the output's defects by root cause and pick the repair strategy — within bounds.

Each defect is classified (graph/quality/diagnosis.py) and the round takes the strongest strategy its
defects need, raised one rung each time a class comes back. The actor receives the diagnosis as
structured data (class, location, step, expected/actual, strategy), not prose. A REPLAN round asks
the planner for a targeted re-plan (graph/quality/replan.py) of the unfinished steps and of the steps its
defects were traced to (graph/quality/fault_trace.py) with their dependents, reopened though done. Every
other done step is kept. A round that would need a HUMAN, or a re-plan with none left, stops repairing.

A final answer given while a required plan step is not done comes here straight from act (the
completion check, before any judge): the defects are then the unfinished steps.

Repairing stops, keeping the best-scoring output (graph/quality/convergence.py), when the same failure has
been seen three times (REPEATED_FAILURE), when the quality score stalls (after one re-plan), when
the repair budget is spent, or when the ladder reaches HUMAN (VALIDATION_FAIL). Such an ending
asks a human first when the run is attended (escalate's `repair_review`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from boundloop.graph.quality import convergence, diagnosis, proportion, replan
from boundloop.graph.core.budget import Budget
from boundloop.graph.core.records import Ending, Quality
from boundloop.graph.core.plan import describe_unfinished, unfinished
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate

REPEAT_LIMIT = 3
FEEDBACK = "Your answer did not pass review. Repair strategy {strategy}: {instruction}\nDiagnosis (JSON):\n{diagnosis}"
DIAGNOSIS_KEYS = ("cause", "location", "step", "expected", "actual", "test", "problem", "hint", "strategy")
"""The fields of a defect the actor sees, in order."""


async def repair(state: LoopState, services: Services) -> LoopUpdate:
    quality: Quality = {**(state.get("quality") or {})}
    fresh = quality.get("fresh_from") or {}
    steps = unfinished((state.get("plan") or {}).get("steps", []))
    problems = describe_unfinished(steps) or lines(quality)
    signature = hashlib.sha256(json.dumps(sorted(problems)).encode()).hexdigest()[:16]
    signatures = [*quality.get("failure_signatures", []), signature]
    quality["failure_signatures"] = signatures
    found = diagnosis.defects({}, {}, steps) if steps else diagnosis.defects(quality.get("verification", {}), quality.get("critique", {}), [])
    planned, strategy = diagnosis.plan_round(found, quality.get("repairs", [])[fresh.get("repairs", 0):])
    budget = Budget.model_validate(state["budget"])
    used = state["usage"].get("repairs", 0)
    replans_left = _left(budget.replans, state["usage"].get("replans", 0)) if proportion.planning_allowed(state) else False
    scores = quality.get("scores", [])[fresh.get("scores", 0):]
    window = state["settings"].get("repair_stall_window", 2)
    stalled = not steps and convergence.stalled(scores, window)
    update: LoopUpdate = {"quality": quality, "status": {"phase": "repair"}}
    if signatures[fresh.get("signatures", 0):].count(signature) >= REPEAT_LIMIT:
        update["ending"] = _stop(Terminal.REPEATED_FAILURE, f"the same failure {REPEAT_LIMIT} times: " + "; ".join(problems),
                                 "Change the approach or the task; repeating the same repair will not help.")
    elif stalled and (quality.get("stall_replanned") or not replans_left):
        update["ending"] = _stop(Terminal.VALIDATION_FAIL, _stall_reason(scores, quality["best"], window),
                                 "Review the best output kept in the report, or change the task or the approach.")
    elif budget.repairs is not None and used >= budget.repairs:
        update["ending"] = _stop(Terminal.VALIDATION_FAIL, f"output still fails after {used} repair(s): " + "; ".join(problems),
                                 f"Review the partial output, or allow more repairs (--budget repairs={used + 1}).")
    else:
        if stalled:
            strategy, quality["stall_replanned"] = "REPLAN", True  # stalled: escalate the strategy once before giving up
        if strategy == "REPLAN" and not replans_left:
            strategy = "HUMAN"
        if strategy == "HUMAN":
            causes = sorted({defect["cause"] for defect in planned if defect["strategy"] in ("REPLAN", "HUMAN")})
            update["ending"] = _stop(Terminal.VALIDATION_FAIL, f"{', '.join(causes)} came back after every repair strategy: " + "; ".join(problems),
                                     "Review the best output kept in the report, or change the task or the approach.")
        else:
            update.update(_repair_round(state, quality, planned, strategy, signature, problems))
    return update


def _repair_round(state: LoopState, quality: Quality, planned: list[dict[str, Any]], strategy: diagnosis.Strategy,
                  signature: str, problems: list[str]) -> LoopUpdate:
    """One repair: the log entry, the structured feedback for the actor and, for REPLAN, the planner's errors."""
    score = (quality.get("scores") or [{}])[-1].get("score")
    quality["repairs"] = [*quality.get("repairs", []),
                          {"signature": signature, "problems": problems, "diagnosis": planned, "strategy": strategy, "score": score}]
    shown = [{key: defect[key] for key in DIAGNOSIS_KEYS if defect.get(key) is not None} for defect in planned]
    feedback = FEEDBACK.format(strategy=strategy, instruction=diagnosis.INSTRUCTIONS[strategy], diagnosis=json.dumps(shown, indent=1))
    update: LoopUpdate = {"messages": [HumanMessage(feedback)], "usage": {"repairs": 1}}
    if strategy == "REPLAN":
        why = [f"the output failed review ({defect['cause']}): {defect['problem']}"
               + (f" [traced to step {defect['step']}: {defect['trace']}]" if defect.get("step") else "") for defect in planned]
        current = state.get("plan") or {}
        update["plan"] = {**current, "valid": False, "errors": why, "replan": _replan_request(current.get("steps", []), planned, "; ".join(why))}
    return update


def _replan_request(steps: Sequence[Mapping[str, Any]], planned: Sequence[Mapping[str, Any]], reason: str) -> dict[str, Any]:
    """The re-plan a REPLAN round asks for. The steps its defects were traced to (graph/quality/fault_trace.py)
    are reopened, done or not, with their dependents; the unfinished steps are replaced as well, as
    before tracing. No defect traced: the unfinished steps alone (none: the whole plan but its done steps)."""
    ids = {step["id"] for step in steps}  # a step of an earlier plan, since replaced, is no trace
    traced = {defect["step"] for defect in planned if defect.get("step") in ids}
    untraced = replan.affected(steps, {step["id"] for step in unfinished(steps)})
    if not traced:
        return replan.request("verification", reason, untraced)
    reach = set(replan.with_dependents(steps, traced))
    done = {step["id"] for step in steps if step.get("status") == "done"}
    return replan.request("verification", reason, [step["id"] for step in steps if step["id"] in reach | set(untraced)],
                          traced=[step["id"] for step in steps if step["id"] in traced],
                          reopened=[step["id"] for step in steps if step["id"] in reach & done])


def _stop(code: Terminal, reason: str, next_safe_action: str) -> Ending:
    """A repair ending a human can still resolve when the run is attended (guards.stop → escalate)."""
    return ending(code, reason, next_safe_action, escalation="repair_review")


def _stall_reason(scores: Sequence[Mapping[str, Any]], best: Mapping[str, Any], window: int) -> str:
    trend = ", ".join(str(entry["score"]) for entry in scores)
    return (f"repairs stalled: quality scores {trend}, no gain in the last {window} iterations; "
            f"keeping the best output (iteration {best['iteration']}, score {best['score']})")


def _left(limit: int | None, used: int) -> bool:
    return limit is None or used < limit


def lines(quality: Mapping[str, Any]) -> list[str]:
    """The verifier's failures and the critic's defects, as one list of actionable lines (the repair log's `problems`)."""
    lines = [f"{failure['criterion']}: {failure['reason']}" for failure in quality.get("verification", {}).get("failures", [])]
    critique = quality.get("critique", {})
    lines += [f"{name} below its minimum ({critique.get('scores', {}).get(name)})" for name in critique.get("below_minimum", [])]
    lines += [
        f"{defect.get('location') or 'output'}: {defect['problem']}" + (f" (hint: {defect['repair_hint']})" if defect.get("repair_hint") else "")
        for defect in critique.get("defects", [])
    ]
    return lines or ["the output failed review without a stated reason"]
