"""observe: ground what the executed calls returned, and advance the plan only from that.

An `ok` observation is promoted to `verified`; anything else stays where it is, with its code.
Plan steps are marked done only when every tool they expect has a verified observation.
Also settles the breakers (repeated calls, circuits) and the wave's wall-clock time, and sends
a call whose outcome a crash made unknown to human review.
"""

from __future__ import annotations

from typing import Any

from graph.services import Services, current_run_id
from graph.status import Terminal, ending
from tools import breakers


async def observe(state: dict[str, Any], services: Services) -> dict[str, Any]:
    observations = state.get("observations", [])
    fresh = [obs for obs in observations if obs.get("stage") in {"observed", "attempted"} and not obs.get("grounded")]
    grounded = [
        {"call_id": obs["call_id"], "grounded": True, **({"stage": "verified"} if obs["status"] == "ok" else {})}
        for obs in fresh
    ]
    verified_tools = {obs["tool"] for obs in observations if obs["status"] == "ok"}
    breaker_state = state.get("breakers") or {}
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    calls = {call["call_id"]: call for call in [*(c for wave in state.get("dispatch", []) for c in wave), *state.get("approvals", [])]}
    for obs in fresh:
        spec, call = registry.get(obs["tool"]), calls.get(obs["call_id"])
        if spec is not None and call is not None:
            breaker_state = breakers.record(breaker_state, spec, call["args"], obs["status"], obs["ended_at"])
    done_ids = {obs["call_id"] for obs in observations if obs.get("stage") != "intended"}
    waiting = [wave for wave in state.get("dispatch", []) if not all(call["call_id"] in done_ids for call in wave)]
    update: dict[str, Any] = {
        "observations": grounded,
        "breakers": breaker_state,
        "dispatch": waiting,
        "status": {"phase": "observe"},
        "usage": {"wall_clock_s": _span(fresh)},
    }
    if plan := state.get("plan"):
        update["plan"] = {**plan, "steps": advance(plan.get("steps", []), verified_tools)}
    if unknown := [obs for obs in fresh if obs["status"] == "unknown_after_crash"]:
        update["ending"] = ending(
            Terminal.REVIEW_REQUIRED,
            "outcome unknown after a crash: " + "; ".join(f"{obs['tool']} ({obs['call_id']}, {obs['detail']})" for obs in unknown),
            "Check whether these calls took effect, then start a new run from the partial result.",
        )
    return update


def advance(steps: list[dict[str, Any]], verified_tools: set[str]) -> list[dict[str, Any]]:
    """Mark a step done when its dependencies are done and each expected tool was verified."""
    done = {step["id"] for step in steps if step["status"] == "done"}
    advanced = []
    for step in steps:
        ready = all(dependency in done for dependency in step.get("depends_on", []))
        if step["status"] == "pending" and ready and step.get("tools") and set(step["tools"]) <= verified_tools:
            step = {**step, "status": "done"}
            done.add(step["id"])
        advanced.append(step)
    return advanced


def _span(observations: list[dict[str, Any]]) -> float:
    """Wall time of a wave of parallel calls: first start to last end, not the sum."""
    if not observations:
        return 0.0
    return max(obs["ended_at"] for obs in observations) - min(obs["started_at"] for obs in observations)
