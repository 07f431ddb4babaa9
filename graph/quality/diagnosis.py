"""diagnosis: root-cause classes of a defect and the repair strategy each one calls for.

A defect's class comes from the check that found it where a check can tell (verify tags its own
failures: schema, test, artifact, tool error); otherwise from the critic, which names a class per
defect; a defect nobody classified takes the class of the rubric dimension it hurts most.

The strategy follows from the class and whether the defect is located (the cheapest repair
likely to work), then escalates one rung each time the same class comes back after a repair:

    MINIMAL_EDIT → SECTION_REWRITE → REPLAN → HUMAN
    FULL_REGENERATION, RE_RETRIEVE, RETRY_TOOL → REPLAN → HUMAN

A repair round uses the strongest strategy any of its defects needs. A defect keeps the plan step it
was traced to (`step`, graph/quality/fault_trace.py): a REPLAN round reopens that step and its dependents.
Pure functions only.
"""

from __future__ import annotations

from enum import StrEnum
from collections.abc import Mapping, Sequence
from typing import Any, Literal


class RootCause(StrEnum):
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    """The output does not match its schema."""
    FACTUAL_ERROR = "FACTUAL_ERROR"
    """A claim the evidence contradicts."""
    LOGIC_ERROR = "LOGIC_ERROR"
    """Invalid reasoning or a code bug (a failing test)."""
    INCOMPLETENESS = "INCOMPLETENESS"
    """A required part is missing."""
    COHERENCE_FAILURE = "COHERENCE_FAILURE"
    """The output contradicts itself."""
    SAFETY_VIOLATION = "SAFETY_VIOLATION"
    """Content that breaks a policy."""
    HALLUCINATION = "HALLUCINATION"
    """A claim no evidence grounds."""
    RETRIEVAL_GAP = "RETRIEVAL_GAP"
    """Not enough evidence to do the task."""
    TOOL_FAILURE = "TOOL_FAILURE"
    """A tool returned an error or an unexpected result."""


Strategy = Literal["MINIMAL_EDIT", "SECTION_REWRITE", "FULL_REGENERATION", "RE_RETRIEVE", "RETRY_TOOL", "REPLAN", "HUMAN"]
RANK: tuple[Strategy, ...] = ("MINIMAL_EDIT", "SECTION_REWRITE", "RETRY_TOOL", "RE_RETRIEVE", "FULL_REGENERATION", "REPLAN", "HUMAN")
"""Strategies from the cheapest to the strongest; a round takes the strongest its defects need."""
NEXT: dict[Strategy, Strategy] = {
    "MINIMAL_EDIT": "SECTION_REWRITE", "SECTION_REWRITE": "REPLAN", "FULL_REGENERATION": "REPLAN",
    "RE_RETRIEVE": "REPLAN", "RETRY_TOOL": "REPLAN", "REPLAN": "HUMAN", "HUMAN": "HUMAN",
}
"""The rung above each strategy, taken when the same class recurs."""

_LOCATED_FIRST: dict[RootCause, tuple[Strategy, Strategy]] = {
    RootCause.FACTUAL_ERROR: ("MINIMAL_EDIT", "SECTION_REWRITE"),
    RootCause.LOGIC_ERROR: ("MINIMAL_EDIT", "SECTION_REWRITE"),
    RootCause.SAFETY_VIOLATION: ("MINIMAL_EDIT", "SECTION_REWRITE"),
    RootCause.HALLUCINATION: ("MINIMAL_EDIT", "SECTION_REWRITE"),
    RootCause.INCOMPLETENESS: ("SECTION_REWRITE", "SECTION_REWRITE"),
    RootCause.COHERENCE_FAILURE: ("SECTION_REWRITE", "SECTION_REWRITE"),
    RootCause.SCHEMA_VIOLATION: ("FULL_REGENERATION", "FULL_REGENERATION"),
    RootCause.RETRIEVAL_GAP: ("RE_RETRIEVE", "RE_RETRIEVE"),
    RootCause.TOOL_FAILURE: ("RETRY_TOOL", "RETRY_TOOL"),
}
"""class → (strategy when the defect is located, strategy when it is not)."""

INSTRUCTIONS: dict[Strategy, str] = {
    "MINIMAL_EDIT": "Change only what each defect's location names; keep the rest of the answer as it is.",
    "SECTION_REWRITE": "Rewrite the parts the defects name (add what is missing, resolve contradictions); keep the parts that are right.",
    "FULL_REGENERATION": "Write the whole answer again from scratch so it meets the task and the output schema.",
    "RE_RETRIEVE": "Gather more evidence first: call read-only tools with broader or other queries, then answer only from what they return.",
    "RETRY_TOOL": "A tool failed: call it again with corrected arguments, or use another tool that gives the same facts, then answer.",
    "REPLAN": "The plan is being revised; follow the new plan.",
    "HUMAN": "A human reviews the output.",
}
"""What the actor is told to do for each strategy (the repair prompt's `instruction`)."""

DIMENSION_CAUSE: dict[str, RootCause] = {
    "correctness": RootCause.FACTUAL_ERROR,
    "completeness": RootCause.INCOMPLETENESS,
    "coherence": RootCause.COHERENCE_FAILURE,
    "safety": RootCause.SAFETY_VIOLATION,
}
"""The class a rubric dimension below its minimum stands for, when nothing more precise is known."""


def base_strategy(cause: RootCause, location: str | None) -> Strategy:
    """The cheapest strategy for the class, a minimal edit only at a precise location."""
    located, unlocated = _LOCATED_FIRST[cause]
    return located if location else unlocated


def escalated(strategy: Strategy, recurrences: int) -> Strategy:
    """`strategy` raised one rung per earlier repair round that already had this class."""
    for _ in range(recurrences):
        strategy = NEXT[strategy]
    return strategy


def strongest(strategies: list[Strategy]) -> Strategy:
    return max(strategies, key=RANK.index)


def defects(verification: Mapping[str, Any], critique: Mapping[str, Any], unfinished_steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every defect of the output, classified: unfinished plan steps, the verifier's failures, then the
    critic's defects (or, when it listed none, its dimensions below their minimum)."""
    found = [_step_defect(step) for step in unfinished_steps]
    found += [_failure_defect(failure) for failure in verification.get("failures", [])]
    worst = _worst_dimension(critique)
    for defect in critique.get("defects", []):
        cause = defect.get("root_cause")
        found.append({"cause": cause or (DIMENSION_CAUSE[worst] if worst else RootCause.LOGIC_ERROR).value,
                      "source": "critic" if cause else "rubric", "location": defect.get("location") or None,
                      "problem": defect["problem"], "hint": defect.get("repair_hint") or None, **_traced(defect)})
    if not critique.get("defects"):
        scores = critique.get("scores", {})
        found += [{"cause": DIMENSION_CAUSE[name].value, "source": "rubric", "location": None,
                   "problem": f"{name} below its minimum ({scores.get(name)})", "hint": None}
                  for name in critique.get("below_minimum", [])]
    return found or [{"cause": RootCause.LOGIC_ERROR.value, "source": "default", "location": None,
                      "problem": "the output failed review without a stated reason", "hint": None}]


def plan_round(found: list[dict[str, Any]], history: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Strategy]:
    """Each defect with its strategy (escalated by how many earlier rounds had its class), and the round's strategy."""
    seen = [{defect["cause"] for defect in round_.get("diagnosis", [])} for round_ in history]
    planned = [{**defect, "strategy": escalated(base_strategy(RootCause(defect["cause"]), defect.get("location")),
                                                 sum(defect["cause"] in causes for causes in seen))} for defect in found]
    return planned, strongest([defect["strategy"] for defect in planned])


def _failure_defect(failure: dict[str, Any]) -> dict[str, Any]:
    """A verifier failure: its own class when the check tagged one; a judge's unmet criterion is INCOMPLETENESS."""
    return {"cause": failure.get("cause") or RootCause.INCOMPLETENESS.value, "source": "check" if failure.get("cause") else "judge",
            "location": failure.get("location"), "problem": f"{failure['criterion']}: {failure['reason']}", "hint": None,
            **{key: failure[key] for key in ("test", "expected", "actual") if failure.get(key) is not None}, **_traced(failure)}


def _traced(found: dict[str, Any]) -> dict[str, Any]:
    """The plan step a defect was traced to, and how (graph/quality/fault_trace.py); nothing when it names none."""
    return {key: found[key] for key in ("step", "trace", "ignored_step") if found.get(key)}


def _step_defect(step: Mapping[str, Any]) -> dict[str, Any]:
    """An unfinished plan step: a failed tool call is TOOL_FAILURE, a step never done INCOMPLETENESS."""
    cause = RootCause.TOOL_FAILURE if step.get("failure") else RootCause.INCOMPLETENESS
    return {"cause": cause.value, "source": "plan", "location": f"step {step['id']}",
            "problem": step.get("failure") or f"step {step['id']} ({step['description']}) is not done", "hint": None}


def _worst_dimension(critique: Mapping[str, Any]) -> str | None:
    scores = critique.get("scores", {})
    below = critique.get("below_minimum", [])
    return min(below, key=lambda name: scores.get(name, 0.0)) if below else None
