"""guard_check: run each conditional edge of a replayed run again on the state it decided from, and
check that it picks the step the trace recorded next.

The state a guard decided from is the checkpoint its source step saved: a conditional edge reads the
state with its node's writes applied, which is what that step's checkpoint holds, and the step it
picked starts from that checkpoint, whose id its trace events carry (`checkpoint_id`). That
checkpoint, not the trace's summary of the step, is the state to run the guard on: the guards read
far more than a trace event records (messages, plan, dispatch, approvals, usage against the budget),
and they are pure functions of the checkpointed state (graph/guards.py), so run again they pick what
they picked then. A verdict, a usage value or an approval changed in the checkpoint since, or a next
step that is an edge of the graph but not the one the guard picks, shows as a guard that no longer
picks the recorded step; a checkpoint that is gone shows as missing, since the guard cannot be checked.
The guards are read from the compiled graph (its builder's branches), never named here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send


async def guard_problems(graph: CompiledStateGraph, run_id: str, pairs: Sequence[tuple[list[Any], list[Any]]]) -> list[str]:
    """For each (step, next step) of the trace whose step has a conditional edge, where the guard,
    run again on the checkpoint the next step started from, does not pick the recorded next step."""
    branches = graph.builder.branches
    problems: list[str] = []
    for before, group in pairs:
        sources = list(dict.fromkeys(event.node for event in before if event.node in branches))
        if not sources:
            continue
        step, checkpoint_id = group[0].data.get("step"), group[0].data.get("checkpoint_id")
        recorded = sorted(dict.fromkeys(event.node for event in group))
        values = await _state_at(graph, run_id, checkpoint_id)
        if values is None:
            problems.append(f"step {step}: checkpoint {checkpoint_id} that {' | '.join(sources)}'s guard decided from is missing; the guard cannot be run again")
            continue
        picked: list[str] = []
        names: list[str] = []
        for source in sources:
            for name, spec in branches[source].items():
                names.append(name)
                picked += _targets(await spec.path.ainvoke(values), spec.ends)
        if sorted(dict.fromkeys(picked)) != recorded:
            problems.append(f"step {step}: {', '.join(names)} on the recorded state picks {' | '.join(sorted(dict.fromkeys(picked)))}, "
                            f"but the trace records {' | '.join(recorded)}")
    return problems


async def _state_at(graph: CompiledStateGraph, run_id: str, checkpoint_id: str | None) -> dict[str, Any] | None:
    """The values of the run's checkpoint `checkpoint_id` as saved (no pending writes applied); None when it is not there."""
    if not checkpoint_id:
        return None
    snapshot = await graph.aget_state({"configurable": {"thread_id": run_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}})
    return dict(snapshot.values) if snapshot.metadata is not None and snapshot.values else None


def _targets(picked: Any, ends: dict[Hashable, str] | None) -> list[str]:
    """The nodes a guard's answer sends the run to: a node name (mapped through the edge's ends), or Sends."""
    answers = picked if isinstance(picked, list) else [picked]
    return [answer.node if isinstance(answer, Send) else (ends or {}).get(answer, str(answer)) for answer in answers]
