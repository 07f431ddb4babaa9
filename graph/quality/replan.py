"""replan: targeted re-planning — repair only the steps that broke.

A re-plan is requested with a cause when validation rejects a plan (validate_plan) or when a step
is stuck after execution (observe: its calls failed `STEP_ATTEMPTS` times), or when a repair's
strategy is to re-plan (repair: the output failed review in a way edits cannot fix). It names the affected
steps — the broken ones and everything that depends on them — and the planner is asked for
replacements of those only. Every other step is kept as it stands, progress included: a done
step stays done and its calls are never made again; a re-plan cannot rewrite it. A plan-wide
problem (no steps, duplicate ids, a budget that does not fit, an unreadable reply) names no step:
then the whole plan is replaced, and still the done steps are kept. Each re-plan counts against
`budget.replans` and is logged in the plan's `revisions` with its cause.

One exception to "done stays done": a verification failure traced to the step that produced the
faulty thing (graph/quality/fault_trace.py) reopens that step — it is done, but wrong — and its dependents,
which were built on it. Only those are `reopened`; every other done step is kept and never re-run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from boundloop.graph.core.plan import StepT

Cause = Literal["validation", "step_failed", "verification"]


def affected(steps: Sequence[Mapping[str, Any]], roots: set[str]) -> list[str]:
    """`roots` and every step that depends on one of them, directly or not, in plan order; never a done step."""
    done = {step["id"] for step in steps if step.get("status") == "done"}
    return [step_id for step_id in with_dependents(steps, roots) if step_id not in done]


def with_dependents(steps: Sequence[Mapping[str, Any]], roots: set[str]) -> list[str]:
    """`roots` and every step that depends on one of them, directly or not, in plan order, done ones
    included: a step a verification failure is traced to is done but wrong, and so is what was built on it."""
    hit = set(roots)
    grew = True
    while grew:
        grew = False
        for step in steps:
            if step["id"] not in hit and hit & set(step.get("depends_on", [])):
                hit.add(step["id"])
                grew = True
    return [step["id"] for step in steps if step["id"] in hit]


def request(cause: Cause, reason: str, steps: list[str], *, traced: list[str] | None = None,
            reopened: list[str] | None = None) -> dict[str, Any]:
    """A pending re-plan: why, and which steps to replace (empty: the whole plan but its done steps);
    for a traced verification failure, the steps it was traced to and the done steps it reopens."""
    pending: dict[str, Any] = {"cause": cause, "reason": reason, "steps": steps}
    if traced:
        pending.update(traced=traced, reopened=reopened or [])
    return pending


def kept(steps: Sequence[StepT], pending: Mapping[str, Any]) -> list[StepT]:
    """The steps a re-plan keeps as they are: done ones unless reopened, and all not named when it is targeted."""
    named, reopen = set(pending.get("steps") or []), set(pending.get("reopened") or [])
    return [step for step in steps
            if (step.get("status") == "done" and step["id"] not in reopen) or (named and step["id"] not in named)]


def merge(keep: Sequence[Mapping[str, Any]], replacements: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The kept steps, then the replacements; a replacement reusing a kept step's id is dropped
    (a re-plan cannot rewrite a kept step, whatever the planner sends back)."""
    kept_ids = {step["id"] for step in keep}
    return [*keep, *(step for step in replacements if step["id"] not in kept_ids)]


def revision(pending: Mapping[str, Any], keep: Sequence[Mapping[str, Any]], new_steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The log entry of one re-plan: cause, reason, what was replaced, what stayed."""
    kept_ids = {step["id"] for step in keep}
    entry = {"cause": pending["cause"], "reason": pending["reason"], "replaced": pending.get("steps") or "all",
             "kept": sorted(kept_ids), "new": [step["id"] for step in new_steps if step["id"] not in kept_ids]}
    if pending.get("traced"):
        entry.update(traced=pending["traced"], reopened=pending.get("reopened", []))
    return entry


def planner_brief(pending: dict[str, Any], steps: list[dict[str, Any]]) -> str:
    """What the planner reads for a re-plan: the cause, the steps it keeps, the steps to replace."""
    keep = kept(steps, pending)
    kept_ids = {step["id"] for step in keep}
    replace = [step for step in steps if step["id"] not in kept_ids]
    lines = [f"Re-plan ({pending['cause']}): {pending['reason']}"]
    lines.append("Kept as they are (do not return them; new steps may depend on them):")
    lines += [f"- {step['id']} [{step.get('status', 'pending')}]: {step['description']}" for step in keep] or ["- (none)"]
    lines.append("Replace these, and return only the replacement steps (new ids or the same ones):")
    reopen = set(pending.get("reopened") or [])
    lines += [f"- {step['id']}: {step['description']}" + (f" (failed: {step['failure']})" if step.get("failure") else "")
              + (" (done, but verification traced a failure to it or to a step it depends on)" if step["id"] in reopen else "")
              for step in replace]
    return "\n".join(lines)
