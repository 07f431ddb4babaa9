"""critique: an independent critic scores the output on a weighted rubric (correctness, completeness,
coherence, safety) and lists defects.

When the critic and the verifier disagree (one passes what the other fails), an attended run asks
a human to review rather than trusting either. So it does when the critic (or, before it, the
judge) gave no usable reply even when asked again and nobody else found the output wrong; an
unattended run then ends UNAVAILABLE_DEP naming the role, and keeps its work.

The critic sees the task, the output, the evidence and the verifier's findings — never the
actor's messages. It names a root-cause class per defect (graph/quality/diagnosis.py) and, where it can
tell, the plan step that produced it (checked against the plan: graph/quality/fault_trace.py). Its verdict
passes only when every dimension meets its minimum (an L∞ gate: no dimension may be traded for
another), and verification passed too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from boundloop.graph.quality import convergence, fault_trace, proportion
from boundloop.graph.core.records import Quality
from boundloop.graph.core import escalations
from boundloop.graph.quality.diagnosis import RootCause
from boundloop.graph.models.catalog import NoReply, ask_for, unusable_reply_ending
from boundloop.graph.context import fitting
from boundloop.graph.models.prompts import CRITIC, task_brief
from boundloop.graph.services import Services
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.nodes import verify

RUBRIC: dict[str, tuple[float, float]] = {
    "correctness": (0.40, 0.80),
    "completeness": (0.25, 0.70),
    "coherence": (0.20, 0.75),
    "safety": (0.15, 0.95),
}
"""dimension → (weight, minimum): a score below a dimension's minimum fails it whatever the total."""


class Scores(BaseModel):
    correctness: float = Field(ge=0, le=1)
    completeness: float = Field(ge=0, le=1)
    coherence: float = Field(ge=0, le=1)
    safety: float = Field(ge=0, le=1)


class Defect(BaseModel):
    location: str = ""
    problem: str
    repair_hint: str = ""
    root_cause: RootCause | None = None
    """One of the nine root-cause classes (graph/quality/diagnosis.py); a name outside them makes the reply unusable (asked again). Absent:
    the repair classifies the defect by the rubric dimension it hurts most."""
    step: str = ""
    """The plan step that produced the defective part, when the critic can tell; a name that is not a
    step of the plan is ignored (graph/quality/fault_trace.py)."""


UNSCORED = {"passed": False, "weighted": 0.0, "scores": {}, "below_minimum": [], "defects": []}
"""The critique record when the critic gave no usable score."""


class CriticReply(BaseModel):
    scores: Scores
    defects: list[Defect] = Field(default_factory=list)


async def critique(state: LoopState, services: Services) -> LoopUpdate:
    """The critic's scores, settled against the verdict; beside the judge (no verdict yet), its reply
    alone, as `quality.critique.pending`, for weigh to settle."""
    beside = (state.get("status") or {}).get("phase") == "act"  # from act's step only beside verify (else after it, or resumed)
    verification = (state.get("quality") or {}).get("verification", {}) if not beside else {}
    findings = "not known yet: the verifier checks the output at the same time" if beside else verification.get("failures") or "none"
    plan_lines = _steps_brief((state.get("plan") or {}).get("steps", []))
    output = verify.final_answer(state) if beside else verification.get("output", "")
    request = fitting.fitted(state, "critic", output, state.get("observations", []), lambda output, evidence: [
        SystemMessage(CRITIC),
        HumanMessage(f"{task_brief(state['task'])}\n\nOutput:\n{output}\n\nEvidence:\n{evidence}\n\nVerifier findings: {findings}\n\nPlan steps:\n{plan_lines}"),
    ])
    asking = {**state, "budget": proportion.model_shares(state)[1].model_dump(mode="json")} if beside else state
    try:
        parsed, problem, update = await ask_for(asking, services, "critic", request, CriticReply)
    except NoReply as stopped:  # the run ends here; the trace still gets the (unscored) validation result
        if beside:  # verify writes the step's ending, if any: weigh applies this one after it
            return {**_spent(stopped.update), "quality": {"critique": {"pending": {"ending": stopped.ending, "problem": str(stopped)}}}}
        return {**stopped.update, "quality": {"critique": unheard(str(stopped))}, "status": {"phase": "critique"}}
    if beside:
        return {**_spent(update), "quality": {"critique": {"pending": {"reply": None if parsed is None else parsed.model_dump(mode="json"), "problem": problem}}}}
    return {**update, **settled(state, parsed, problem), "status": {"phase": "critique"}}


def unheard(problem: str) -> dict[str, Any]:
    """The critique record when no model answered the critic."""
    return {**UNSCORED, "disagree": False, "unusable": f"critic not heard: {problem}"}


def _spent(update: LoopUpdate) -> LoopUpdate:
    """What the critic's calls cost and measured, without the channels verify writes in the same step."""
    return cast(LoopUpdate, {key: value for key, value in update.items() if key in ("usage", "breakers", "context")})


def settled(state: LoopState, parsed: CriticReply | None, problem: str | None) -> LoopUpdate:
    """The critique record from the critic's reply (None: unusable, for `problem`) and the verdict in
    `state`, with the iteration's quality score; the ending when an unusable reply leaves nobody to decide."""
    quality: Quality = {**(state.get("quality") or {})}
    verification = quality.get("verification", {})
    if parsed is not None:
        quality["critique"] = score(parsed, verification.get("passed", False))
        steps, calls = (state.get("plan") or {}).get("steps", []), fault_trace.served(state.get("observations", []))
        quality["critique"]["defects"] = [fault_trace.critic_step(defect, steps, calls) for defect in quality["critique"]["defects"]]
        return {"quality": _measured(quality, state)}
    found_wrong = not verification.get("passed", False) and not verification.get("undecided")
    quality["critique"] = {**UNSCORED, "disagree": not found_wrong, "unusable": f"critic {problem}"}
    if not found_wrong and not escalations.can_ask_a_human(state):
        return {"quality": quality, "ending": unusable_reply_ending("critic", problem)}
    # Found wrong by the verifier: its failures drive the repair. Otherwise a human reviews it.
    return {"quality": _measured(quality, state)}


def _steps_brief(steps: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"- {step['id']} [{step.get('status', 'pending')}]: {step['description']}" for step in steps) or "(no plan steps)"


def _measured(quality: Quality, state: LoopState) -> Quality:
    """The iteration's quality score recorded, for convergence control (graph/quality/convergence.py)."""
    usage = state.get("usage", {})
    return convergence.record(quality, iteration=usage.get("repairs", 0), turn=usage.get("calls_by_role", {}).get("actor", 0))


def score(reply: CriticReply, verified: bool) -> dict[str, Any]:
    """Weighted score, the dimensions below their minimum, and the pass verdict."""
    scores = reply.scores.model_dump()
    below = [name for name, (_, minimum) in RUBRIC.items() if scores[name] < minimum]
    weighted = round(sum(scores[name] * weight for name, (weight, _) in RUBRIC.items()), 4)
    return {
        "passed": verified and not below,
        "disagree": verified == bool(below),
        "weighted": weighted,
        "scores": scores,
        "below_minimum": below,
        "defects": [defect.model_dump(mode="json") for defect in reply.defects],
    }
