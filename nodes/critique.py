"""critique: an independent critic scores the output on seed 000's rubric and lists defects.

When the critic and the verifier disagree (one passes what the other fails), an attended run asks
a human to review rather than trusting either.

The critic sees the task, the output, the evidence and the verifier's findings — never the
actor's messages. Its verdict passes only when every dimension meets its minimum (an L∞ gate:
no dimension may be traded for another), and verification passed too.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from graph.models import call_model
from graph.prompts import CRITIC, evidence_brief, task_brief
from graph.replies import parse_reply
from graph.services import Services

RUBRIC: dict[str, tuple[float, float]] = {
    "correctness": (0.40, 0.80),
    "completeness": (0.25, 0.70),
    "coherence": (0.20, 0.75),
    "safety": (0.15, 0.95),
}
"""dimension → (weight, minimum), seed 000 §15.6.2."""


class Scores(BaseModel):
    correctness: float = Field(ge=0, le=1)
    completeness: float = Field(ge=0, le=1)
    coherence: float = Field(ge=0, le=1)
    safety: float = Field(ge=0, le=1)


class Defect(BaseModel):
    location: str = ""
    problem: str
    repair_hint: str = ""


class CriticReply(BaseModel):
    scores: Scores
    defects: list[Defect] = Field(default_factory=list)


async def critique(state: dict[str, Any], services: Services) -> dict[str, Any]:
    quality = dict(state.get("quality") or {})
    verification = quality.get("verification", {})
    request = [
        SystemMessage(CRITIC),
        HumanMessage(
            f"{task_brief(state['task'])}\n\nOutput:\n{verification.get('output', '')}\n\n"
            f"Evidence:\n{evidence_brief(state.get('observations', []))}\n\n"
            f"Verifier findings: {verification.get('failures') or 'none'}"
        ),
    ]
    reply, usage = await call_model(state, "critic", request)
    parsed, problem = parse_reply(str(reply.content), CriticReply)
    quality["critique"] = score(parsed, problem, verification.get("passed", False))
    return {"quality": quality, "usage": usage, "status": {"phase": "critique"}}


def score(reply: CriticReply | None, problem: str | None, verified: bool) -> dict[str, Any]:
    """Weighted score, the dimensions below their minimum, and the pass verdict."""
    if reply is None:
        return {"passed": False, "disagree": False, "weighted": 0.0, "scores": {}, "below_minimum": list(RUBRIC),
                "defects": [{"location": "critic", "problem": f"critic {problem}", "repair_hint": ""}]}
    scores = reply.scores.model_dump()
    below = [name for name, (_, minimum) in RUBRIC.items() if scores[name] < minimum]
    weighted = round(sum(scores[name] * weight for name, (weight, _) in RUBRIC.items()), 4)
    return {
        "passed": verified and not below,
        "disagree": verified == bool(below),
        "weighted": weighted,
        "scores": scores,
        "below_minimum": below,
        "defects": [defect.model_dump() for defect in reply.defects],
    }
