"""progress: each phase's progress as a JSON event — the phase, every budget dimension's used and
limit, and the tool calls it settled. The CLI prints it; the server streams it (`custom` mode)."""

from __future__ import annotations

from contextvars import ContextVar
from collections.abc import Mapping
from typing import Any

from boundloop.graph.core.budget import Budget, used_of

PHASE_PROGRESS_STREAMED: ContextVar[bool] = ContextVar("boundloop_phase_progress_streamed", default=True)
"""Whether each phase's `phase_progress` goes to a `custom` stream consumer: the server's clients
(Studio, SDK) always may; a Runner drive only when its observer takes `custom` events, and sets it
(the nodes of the drive inherit its context). Not computed when nobody would receive it."""



def phase_progress(
    node: str, update: Mapping[str, Any], usage: Mapping[str, Any], budget: dict[str, Any] | None, known: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One phase's progress as JSON: the phase, used/limit of every budget dimension (limit None:
    unlimited), and the outcome of each tool call the phase settled (tool names looked up in the
    `known` observations when the update names only the call). The CLI prints it; the server
    streams it in the `custom` stream mode."""
    limits = Budget.model_validate(budget) if budget else None
    dimensions = {
        name: {"used": used_of(usage, name), "limit": getattr(limits, name)} for name in Budget.model_fields if name != "parallel_calls"
    } if limits else {}
    outcomes = [(obs, obs.get("status") or obs.get("stage")) for obs in update.get("observations", [])]
    unnamed = {obs["call_id"] for obs, outcome in outcomes if outcome not in (None, "pending") and not obs.get("tool")}
    names = _tool_names(known or [], unnamed)
    tools = [
        {"tool": tool, "status": outcome}
        for obs, outcome in outcomes
        if outcome not in (None, "pending") and (tool := obs.get("tool") or names.get(obs["call_id"]))
    ]
    return {"kind": "progress", "phase": node, "budget": dimensions, "tools": tools}


def _tool_names(known: list[dict[str, Any]], wanted: set[str]) -> dict[str, Any]:
    """The tools of the `wanted` call ids, searched from the newest observation back: the calls a
    phase settles are recent, so a long run's history is not read at every step."""
    names: dict[str, Any] = {}
    for obs in reversed(known):
        if len(names) == len(wanted):
            break
        if obs["call_id"] in wanted:
            names[obs["call_id"]] = obs.get("tool")
    return names
