"""plan: the shape of a plan as the planner must return it, and its stable hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class EvidenceCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    id: str
    description: str
    depends_on: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    """Tools the step expects to use; the step is done when each has a verified observation."""
    done_when: str = ""
    evidence: EvidenceCall | None = None
    """A read-only call the retrieve phase runs before acting."""
    status: Literal["pending", "done"] = "pending"


class Blocked(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: Literal["IMPOSSIBLE", "MISSING_INFO", "AMBIGUOUS_INTENT"]
    reason: str


class PlanReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[PlanStep] = Field(default_factory=list)
    blocked: Blocked | None = None


def plan_hash(steps: list[dict[str, Any]]) -> str:
    """SHA-256 of the steps without their progress, for provenance."""
    frozen = [{key: value for key, value in step.items() if key != "status"} for step in steps]
    return hashlib.sha256(json.dumps(frozen, sort_keys=True).encode()).hexdigest()
