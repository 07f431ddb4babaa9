"""goal_check: every N actor turns, is the run still moving toward its objective? (seed 002's progress
validation, seed 003's goal loop)

A cheap, deterministic check — no model call. After each block of N turns it looks at what the
block produced: new verified observations of the actor's calls, plan steps those calls completed,
and repair iterations that beat the best quality score before them. None of these over the whole
block ends the run REPEATED_FAILURE ("the same lack of progress, again and again") with the evidence
examined, instead of spending the rest of the budget. A pure function of the checkpointed state,
read by every guard through graph/tripwires.py: it holds for the whole of the turn that closed the
block, so the guard that routes to finalize and finalize itself read the same verdict.
"""

from __future__ import annotations

import re
from typing import Any

from graph.convergence import MIN_GAIN
from graph.status import Terminal, ending

_ACT_CALL = re.compile(r"^a(\d+)\.")
"""Actor call ids are `a<turn>.<position>` (nodes/gate.py); the turn counts from 0."""


def no_progress(state: dict[str, Any]) -> dict[str, Any] | None:
    every = (state.get("settings") or {}).get("goal_check_every", 10)
    turns = (state.get("usage") or {}).get("calls_by_role", {}).get("actor", 0)
    # The block is checked once the turn after it has been asked for: by then every call of the
    # block has run and been observed. It spans turns [first, last].
    if every <= 0 or turns <= every or (turns - 1) % every:
        return None
    first, last = turns - 1 - every, turns - 2
    progress = signals(state, first, last)
    if any(progress.values()):
        return None
    return ending(
        Terminal.REPEATED_FAILURE,
        f"goal check after actor turn {last + 1}: no progress in the last {every} turns "
        f"(no new verified observation, no plan step done, no better repair score)",
        "Change the approach or the task, or split it; the objective was not getting closer and the rest of the budget was kept.",
    )


def signals(state: dict[str, Any], first: int, last: int) -> dict[str, int]:
    """Progress made by actor turns first..last: verified calls, plan steps they completed, repair gains."""
    verified = {obs["call_id"] for obs in state.get("observations", [])
                if obs.get("phase") == "act" and obs.get("stage") in ("verified", "committed") and _in(obs["call_id"], first, last)}
    steps = [step for step in (state.get("plan") or {}).get("steps", [])
             if step.get("status") == "done" and set((step.get("verified") or {}).values()) & verified]
    scores = (state.get("quality") or {}).get("scores", [])
    gains = [entry for position, entry in enumerate(scores) if first < entry.get("turn", -1) <= last + 1
             and entry["score"] > max((earlier["score"] for earlier in scores[:position]), default=-1.0) + MIN_GAIN]
    return {"verified_observations": len(verified), "plan_steps_done": len(steps), "repair_gains": len(gains)}


def _in(call_id: str, first: int, last: int) -> bool:
    match = _ACT_CALL.match(call_id)
    return match is not None and first <= int(match.group(1)) <= last
