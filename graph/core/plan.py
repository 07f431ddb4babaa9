"""plan: the shape of a plan as the planner must return it, its stable hash, and plan progress.

Progress is grounded, never declared: the planner can only hand over pending steps, and a step
becomes `done` when a call made for it reached `verified` (observe) — not when some call of the
same tool succeeded somewhere in the run. Which step a call serves is decided at the gate
(graph/schedule.py), which also holds it to the step's dependencies. A step whose calls failed
`STEP_ATTEMPTS` times is `stuck`: the actor's own retry did not fix it, so it is re-planned
(graph/quality/replan.py). The completion check (`unfinished`) is what commit and the act→verify edge read: deterministic,
before any judge.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

StepT = TypeVar("StepT", bound=Mapping[str, Any])
"""A plan step as a caller holds it (a dict, or a LoopState Step): functions that filter steps return the same."""


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
    """Tools the step expects to use; the step is done when each has a verified call made for it."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments a call must carry to serve this step, e.g. {"path": "summary.md"} (a subset match)."""
    optional: bool = False
    """A secondary step: the goal is met without it. Unfinished, it turns SUCCESS into PARTIAL_SUCCESS."""
    done_when: str = ""
    evidence: EvidenceCall | None = None
    """A read-only call the retrieve phase runs before acting."""
    parallel: bool = True
    """Its read-only calls may share a dispatch wave with other calls; false: each runs alone."""
    status: Literal["pending"] = "pending"
    """Every planned step starts pending; only grounded observations move it (done, failed)."""


class Blocked(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: Literal["IMPOSSIBLE", "MISSING_INFO", "AMBIGUOUS_INTENT"]
    reason: str


class PlanReply(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    steps: list[PlanStep] = Field(default_factory=list)
    ordering: Literal["partial", "total"] = "partial"
    """partial: steps run as their `depends_on` allow; total: each step also waits for the one before."""
    blocked: Blocked | None = None

    def ordered_steps(self) -> list[dict[str, Any]]:
        """The steps as JSON, a total ordering written out as dependencies on the previous step."""
        steps = [step.model_dump(mode="json") for step in self.steps]
        if self.ordering == "total":
            for before, step in zip(steps, steps[1:]):
                if before["id"] not in step["depends_on"]:
                    step["depends_on"] = [*step["depends_on"], before["id"]]
        return steps


def plan_hash(steps: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of the steps without their progress, for provenance."""
    frozen = [{key: value for key, value in step.items() if key not in PROGRESS_KEYS} for step in steps]
    return hashlib.sha256(json.dumps(frozen, sort_keys=True).encode()).hexdigest()


PROGRESS_KEYS = frozenset({"status", "verified", "failure", "failures"})
"""Keys observe writes into a step; not part of what was planned."""


def serves(step: Mapping[str, Any], tool: str, args: Any) -> bool:
    """Whether a call of `tool` with `args` can serve `step`: the step expects the tool, and the
    call carries every argument the step names, with the same value."""
    if tool not in step.get("tools", []):
        return False
    wanted = step.get("args") or {}
    return isinstance(args, dict) and all(key in args and args[key] == value for key, value in wanted.items())


STEP_ATTEMPTS = 2
"""Failed calls one step may take before it is re-planned: the first failure goes back to the actor,
who sees the error and may retry differently; a second means retrying does not fix it."""


def stuck(steps: Sequence[StepT]) -> list[StepT]:
    """Failed steps whose calls failed `STEP_ATTEMPTS` times: retrying will not fix them."""
    return [step for step in steps if step.get("status") == "failed" and step.get("failures", 0) >= STEP_ATTEMPTS]


def record_call(steps: Sequence[Mapping[str, Any]], step_id: str, tool: str, call_id: str, problem: str | None) -> list[Mapping[str, Any]]:
    """Steps after a call made for `step_id` ended: verified (`problem` None) or failed with `problem`."""
    updated = []
    for step in steps:
        if step["id"] == step_id:
            if problem is None:
                status = "pending" if step.get("status") == "failed" else step.get("status", "pending")
                step = {**step, "status": status, "verified": {**(step.get("verified") or {}), tool: call_id}, "failure": ""}
            else:
                step = {**step, "status": "failed", "failure": f"{tool} ({call_id}) {problem}", "failures": step.get("failures", 0) + 1}
        updated.append(step)
    return advance(updated)


def advance(steps: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Mark a step done when its dependencies are done and each expected tool has a verified call for it."""
    done = {step["id"] for step in steps if step.get("status") == "done"}
    advanced = []
    for step in steps:
        ready = all(dependency in done for dependency in step.get("depends_on", []))
        complete = step.get("tools") and set(step["tools"]) <= set(step.get("verified") or {})
        if step.get("status") != "done" and ready and complete:
            step = {**step, "status": "done", "failure": ""}
            done.add(step["id"])
        advanced.append(step)
    return advanced


def evidence_to_fetch(steps: Sequence[StepT], evidence: Sequence[Mapping[str, Any]] | None) -> list[StepT]:
    """Evidence steps not done whose evidence the run has not fetched yet (a re-plan keeps what it has)."""
    fetched = {entry["step_id"] for entry in evidence or []}
    return [step for step in steps if step.get("evidence") and step.get("status") != "done" and step["id"] not in fetched]


def unfinished(steps: Sequence[StepT], *, optional: bool = False) -> list[StepT]:
    """Steps that promise a tool call and are not done: required ones, or (optional=True) optional ones.
    A step without tools promises no call; the judge checks it against the criteria."""
    return [step for step in steps if step.get("tools") and step.get("status") != "done" and bool(step.get("optional")) == optional]


def describe_unfinished(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per unfinished step: what it is and why it is not done."""
    lines = []
    for step in steps:
        missing = [tool for tool in step["tools"] if tool not in (step.get("verified") or {})]
        if step.get("failure"):
            why = f"its last call failed: {step['failure']}"
        elif missing:
            why = f"no verified call of {', '.join(missing)} made for it"
        else:
            why = "a step it depends on is not done"
        lines.append(f"step {step['id']} ({step['description']}) is {step.get('status', 'pending')}: {why}")
    return lines
