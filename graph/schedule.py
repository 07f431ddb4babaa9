"""schedule: tie each proposed call to the plan step it serves, hold it to the step's dependencies,
and order one turn's calls into dispatch waves.

A call serves the first unfinished step that expects its tool and whose `args` it carries
(graph/core/plan.py `serves`), preferring a step that is ready. A call whose step waits for a step that
is not done is refused before dispatch (`dependency_unmet`) — unless an earlier call of the same
turn serves that step: then it runs in a later wave of the same turn, after the calls it depends
on, and is checked again right before it goes out (its dependency may have failed meanwhile).
Calls that serve no step are not held back. Within a wave, read-only calls run together (up to
`parallel_calls`); a write, or a call for a step the plan marks `parallel: false`, runs alone.
Reads never move ahead of an earlier write, and writes keep the model's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

from boundloop.graph.core.plan import serves

UNMET = (
    "dependency_unmet: {tool} serves plan step {step}, which waits for {missing} (not done). "
    "The call was not made. Ready steps now: {ready}."
)


@dataclass(frozen=True)
class Binding:
    """Where one proposed call stands: the step it serves, its wave level, or the steps it waits for."""

    step_id: str | None
    level: int = 0
    """0: the first wave of the turn; n: after the calls of level n-1 it depends on."""
    missing: tuple[str, ...] = ()
    """Dependencies not done and not served this turn: the call is refused."""


def done_ids(steps: Sequence[Mapping[str, Any]]) -> set[str]:
    return {step["id"] for step in steps if step.get("status") == "done"}


def missing_dependencies(steps: Sequence[Mapping[str, Any]], step_id: str | None) -> list[str]:
    """The dependencies of `step_id` that are not done (empty for a call that serves no step)."""
    step = next((step for step in steps if step["id"] == step_id), None)
    if step is None:
        return []
    done = done_ids(steps)
    return [dependency for dependency in step.get("depends_on", []) if dependency not in done]


def ready_steps(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """Steps not done whose dependencies all are: the ones a call may serve now."""
    done = done_ids(steps)
    return [step["id"] for step in steps if step["id"] not in done and all(dep in done for dep in step.get("depends_on", []))]


def bind(steps: Sequence[Mapping[str, Any]], calls: list[tuple[str, Any, bool]]) -> list[Binding]:
    """One binding per call of (tool, args, read_only), in the model's order."""
    done = done_ids(steps)
    claimed: set[tuple[str, str]] = set()
    served_at: dict[str, int] = {}
    """Steps an earlier call of this turn serves → the highest level of those calls."""
    last_write, last_any = -1, -1
    bindings = []
    for tool, args, read_only in calls:
        candidates = [
            step for step in steps
            if step["id"] not in done and tool not in (step.get("verified") or {}) and (step["id"], tool) not in claimed
            and serves(step, tool, args)
        ]
        chosen, missing = _choose(candidates, done, served_at)
        floor = max(last_write if read_only else last_any, 0)
        if chosen is None:
            binding = Binding(None, floor)
        elif missing:
            binding = Binding(chosen["id"], missing=tuple(missing))
        else:
            waits = [served_at[dep] + 1 for dep in chosen.get("depends_on", []) if dep not in done]
            binding = Binding(chosen["id"], max([floor, *waits]))
        if binding.step_id is not None and not binding.missing:
            claimed.add((binding.step_id, tool))
            served_at[binding.step_id] = max(served_at.get(binding.step_id, 0), binding.level)
        if not binding.missing:
            last_any = max(last_any, binding.level)
            if not read_only:
                last_write = max(last_write, binding.level)
        bindings.append(binding)
    return bindings


def _choose(candidates: Sequence[Mapping[str, Any]], done: set[str], served_at: dict[str, int]) -> tuple[Mapping[str, Any] | None, list[str]]:
    """A ready step first; then one whose open dependencies this turn serves; else the first, blocked."""
    def open_deps(step: Mapping[str, Any]) -> list[str]:
        return [dep for dep in step.get("depends_on", []) if dep not in done]

    for step in candidates:
        if not open_deps(step):
            return step, []
    for step in candidates:
        if all(dep in served_at for dep in open_deps(step)):
            return step, []
    if candidates:
        return candidates[0], [dep for dep in open_deps(candidates[0]) if dep not in served_at]
    return None, []


def refusal(steps: Sequence[Mapping[str, Any]], tool: str, step_id: str | None, missing: list[str] | tuple[str, ...]) -> str:
    """The text the model reads for a call refused for an unmet dependency."""
    return UNMET.format(tool=tool, step=step_id, missing=", ".join(missing), ready=", ".join(ready_steps(steps)) or "none")


def waves(calls: list[dict[str, Any]], parallel_cap: int) -> list[list[dict[str, Any]]]:
    """Dispatch waves of calls carrying `level`: by level, then the model's order; consecutive
    read-only calls share a wave up to the cap; a `solo` call (by default any call not read-only;
    the gate also marks calls for a step the plan keeps out of parallel waves) runs alone."""
    planned: list[list[dict[str, Any]]] = []
    for call in sorted(calls, key=lambda call: call.get("level", 0)):  # sorted() is stable: model order within a level
        previous = planned[-1][0] if planned else None
        joins = (
            previous is not None and not _solo(call) and not _solo(previous)
            and previous.get("level", 0) == call.get("level", 0) and len(planned[-1]) < parallel_cap
        )
        if joins:
            planned[-1].append(call)
        else:
            planned.append([call])
    return planned


def _solo(call: dict[str, Any]) -> bool:
    return bool(call.get("solo", not call.get("read_only")))
