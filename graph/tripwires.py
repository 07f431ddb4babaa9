"""tripwires: endings a guard reads from state, whichever node produced the evidence.

A refusal at the gate, a failing tool, a judge that finds sources in conflict: none of these
nodes decides that the run is over. Every edge asks `tripped(state)` first (guards.must_stop),
and finalize writes the same ending. Pure functions of the checkpointed state, in order of
severity: safety, permission, loops, conflicting sources, and the periodic goal check
(graph/quality/goal_check.py: a block of actor turns with no progress).

Loop detection: the same call ending the same way three times without
progress (no verified call in between) is a loop — a refused `repeated_call`, the same
`invalid_arguments`, the same tool error — and ends REPEATED_FAILURE with advice to change the
approach, instead of spending the budget to its end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from boundloop.graph.quality import goal_check
from boundloop.graph import safety
from boundloop.graph.core.records import Ending
from boundloop.graph.core.status import Terminal, ending

REPEAT_LIMIT = 3
NOT_A_LOOP = frozenset({"pending", "ok", "budget_exceeded", "cancelled", "unknown_after_crash"})
"""Outcomes that are not the same failure coming back: not ended yet, progress, or endings of their own."""


def tripped(state: Mapping[str, Any]) -> Ending | None:
    return (safety.unsafe(state) or safety.permission_denied(state) or repeated_failure(state) or source_conflict(state)
            or goal_check.no_progress(state))


def repeated_failure(state: Mapping[str, Any]) -> Ending | None:
    failures = []
    for obs in reversed(state.get("observations", [])):  # back to the latest progress only: a long run's history stays unread
        if obs.get("phase") != "act":
            continue
        if obs.get("stage") in ("verified", "committed"):
            break
        if _failure(obs):
            failures.append(obs)
    failures.reverse()
    counts = Counter((obs["tool"], obs.get("args_hash"), _failure(obs)) for obs in failures)
    for (tool, _, status), count in counts.items():
        if count >= REPEAT_LIMIT:
            last = next(obs for obs in reversed(failures) if obs["tool"] == tool and _failure(obs) == status)
            return ending(
                Terminal.REPEATED_FAILURE,
                f"the same call failed {count} times without progress: {tool} ended {status} "
                f"({last.get('detail') or last.get('postcondition') or 'no detail'})",
                "Change the approach: use another tool or other arguments, fix what the error names, or change the task; "
                "more of the same call will not help.",
            )
    return None


def source_conflict(state: Mapping[str, Any]) -> Ending | None:
    """SOURCE_CONFLICT when the judge names a task-critical claim on which two verified observations disagree.
    A conflict that cites fewer than two verified observations is not grounded and is ignored."""
    conflicts = ((state.get("quality") or {}).get("verification") or {}).get("conflicts", [])
    if not conflicts:
        return None
    verified = {obs["call_id"] for obs in state.get("observations", []) if obs.get("stage") in ("verified", "committed")}
    for conflict in conflicts:
        sources = [source for source in conflict.get("sources", []) if source in verified]
        if len(set(sources)) >= 2:
            return ending(
                Terminal.SOURCE_CONFLICT,
                f"sources disagree on {conflict.get('claim', 'a task-critical claim')!r}: {', '.join(sources)}",
                "Resolve which source is right (or add one that settles it), then run again; the claim was not committed.",
                sources=",".join(sources),
            )
    return None


def _failure(obs: dict[str, Any]) -> str | None:
    if obs.get("status") == "ok" and obs.get("postcondition", "").startswith("failed"):
        return "unverified"
    status = obs.get("status")
    return None if status in NOT_A_LOOP or status is None else status
