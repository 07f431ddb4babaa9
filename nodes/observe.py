"""observe: ground what the executed calls returned, and advance the plan only from that. Runs at the
start of act's step after calls were dispatched (nodes/act.py), not as a graph step of its own.

An `ok` observation is promoted to `verified` only when its post-condition holds where the tool
allows one (tools/postconditions.py: the checksum of the file written, the id and data of the
record created, read from the result the ledger kept); anything else stays where it is, with its
code. Each call counts for the plan step the gate bound it to (graph/schedule.py), and a step is
done only when a call made for it is verified; a failed call marks its step failed, and a step
whose calls keep failing asks for a targeted re-plan (graph/quality/replan.py) — or, with no re-plan left,
ends the run BUDGET_EXHAUSTED on `replans`. Results that carry
instructions for the agent are flagged with their cues for the safety breaker (graph/safety.py).
Also settles the breakers (repeated calls, circuits) and the wave's wall-clock time, and sends a
call whose outcome a crash made unknown to human review.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import ToolMessage

from boundloop.checkpoints import store
from boundloop.graph import ladder
from boundloop.graph.core import plan as plans
from boundloop.graph.quality import replan
from boundloop.graph.core.budget import Budget
from boundloop.graph.safety import instruction_cues
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.records import Observation, Plan, Step
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.tools import breakers, pinning, postconditions
from boundloop.tools.errors import BridgeError
from boundloop.tools.registry import qualified_name

TOOL_AUTHORED = frozenset({"ok", "tool_error"})
HUMAN_ANSWER = "answered by a human: the tool did not run, so nothing was verified and no plan step is done by it"
"""Outcomes whose text the tool wrote (the rest are the harness's own words)."""


async def observe(state: LoopState, services: Services) -> LoopUpdate:
    """The grounding of the calls dispatched since the last turn, as a state update ({} when none ran or was settled)."""
    observations = state.get("observations", [])
    index = ladder.of(observations)
    fresh = index.awaiting_grounding(observations)
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    calls = {call["call_id"]: call for call in [*(c for wave in state.get("dispatch", []) for c in wave), *state.get("approvals", [])]}
    results = await _ledger_results(fresh, services)
    texts = _tool_texts(state.get("messages", []), {obs["tool_call_id"] for obs in fresh})
    steps: Sequence[Mapping[str, Any]] = (state.get("plan") or {}).get("steps", [])
    grounded: list[Observation] = []
    ended = []
    for obs in fresh:
        spec, call = registry.get(obs["tool"]), calls.get(obs["call_id"])
        args = call["args"] if call is not None else {}
        record: Observation = {"call_id": obs["call_id"], "grounded": True}
        if obs.get("answered_by"):  # nothing ran: no breaker counts it, no rung above observed, no step done by it
            grounded.append({**record, "postcondition": HUMAN_ANSWER})
            continue
        if spec is not None and call is not None:
            ended.append((spec, args, obs["status"], obs["ended_at"]))
        problem: str | None = f"ended {obs['status']}"
        if obs["status"] == "ok":
            verdict = await _postcondition(spec, obs, results.get(obs["call_id"], (args, None)), registry, state["settings"], services)
            problem = None if verdict.problem is None else f"post-condition failed ({verdict.checked}): {verdict.problem}"
            if verdict.checked:
                record["postcondition"] = verdict.checked if verdict.problem is None else f"failed: {verdict.checked}: {verdict.problem}"
            if problem is None:
                record["stage"] = "verified"
        if obs["status"] in TOOL_AUTHORED and obs["tool_call_id"] in texts:
            record["instructions"] = instruction_cues(texts[obs["tool_call_id"]])
        if step_id := _bound_step(steps, call, obs["tool"]):
            record["step_id"] = step_id
            steps = plans.record_call(steps, step_id, obs["tool"], obs["call_id"], problem)
        grounded.append(record)
    waiting = [wave for wave in state.get("dispatch", []) if not all(_done(index.record(observations, call["call_id"])) for call in wave)]
    update: LoopUpdate = {"observations": grounded, "usage": {"wall_clock_s": _span(fresh)}} if fresh else {}
    if waiting != state.get("dispatch", []):  # unchanged channels are not written: each write is a checkpoint row
        update["dispatch"] = waiting
    if changed := breakers.recorded(state.get("breakers") or {}, ended):
        update["breakers"] = changed
    if (plan := state.get("plan")) and steps != plan.get("steps", []):
        update["plan"] = {**plan, "steps": cast("list[Step]", steps)}  # the plan's steps, with this step's calls recorded
        if not plan.get("replan") and (failing := plans.stuck(steps)):
            update.update(_ask_replan(state, update["plan"], failing))
    if unknown := [obs for obs in fresh if obs["status"] == "unknown_after_crash"]:
        update["ending"] = ending(
            Terminal.REVIEW_REQUIRED,
            "outcome unknown after a crash: " + "; ".join(f"{obs['tool']} ({obs['call_id']}, {obs['detail']})" for obs in unknown),
            "Check whether these calls took effect, then start a new run from the partial result.",
        )
    return update


def _done(record: Mapping[str, Any] | None) -> bool:
    """The call ran, or was refused at approval."""
    return record is not None and record.get("status") != "pending"


def _bound_step(steps: Sequence[Mapping[str, Any]], call: Mapping[str, Any] | None, tool: str) -> str | None:
    """The step the gate bound the call to, while the call (its arguments edited at approval, perhaps) still fits it."""
    step_id = (call or {}).get("step_id")
    step = next((step for step in steps if step["id"] == step_id), None)
    return step_id if call is not None and step is not None and plans.serves(step, tool, call["args"]) else None


def _ask_replan(state: LoopState, plan: Plan, failing: Sequence[Mapping[str, Any]]) -> LoopUpdate:
    """Request a re-plan of the stuck steps and their dependents, or end the run when no re-plan is left."""
    reason = "; ".join(f"step {step['id']} failed {step['failures']} times, last: {step['failure']}" for step in failing)
    budget = Budget.model_validate(state["budget"])
    used = state.get("usage", {}).get("replans", 0)
    pending = replan.request("step_failed", reason, replan.affected(plan["steps"], {step["id"] for step in failing}))
    if budget.replans is not None and used >= budget.replans:
        return {"plan": {**plan, "replan": pending}, "ending": ending(
            Terminal.BUDGET_EXHAUSTED, f"budget.replans exhausted: {used} of {budget.replans} used; {reason}",
            f"Keep the partial result, or run again with more re-plans (--budget replans={used + 1}).", dimension="replans")}
    return {"plan": {**plan, "replan": pending}}


async def _postcondition(
    spec: Any, obs: Mapping[str, Any], sent: tuple[dict[str, Any], Any], registry: Any, settings: dict[str, Any], services: Services
) -> postconditions.Verdict:
    """Check a side-effecting call's result against what was sent, then read the change back through
    the same server. The read-back is the harness's own read-only call: not the model's, not
    budgeted, but checked against its pinned definition like any call, and against a listing asked
    after the write: a server that redefined its read tool meanwhile could otherwise have it vouch
    for a write that did not land."""
    if spec is None or not obs.get("side_effect"):
        return postconditions.NO_CHECK
    arguments, structured = sent
    verdict = postconditions.verify(spec, arguments, structured)
    readers = {tool.name: tool for tool in registry.specs() if tool.server == spec.server}
    read = postconditions.read_back(spec, arguments, structured, readers)
    if read is None or (reader := registry.get(qualified_name(spec.server, read.tool))) is None:
        return verdict
    checked = ", ".join(part for part in (verdict.checked, read.what) if part)
    bridge = await services.bridge(current_run_id(), settings)
    try:
        if refusal := await pinning.changed(bridge, reader, vouches=True):
            return postconditions.Verdict(checked, f"could not read it back: {refusal.text}")
        outcome = await bridge.call(spec.server, read.tool, read.arguments, timeout_s=settings.get("tool_timeout_s", 30.0))
    except BridgeError as error:
        return postconditions.Verdict(checked, f"could not read it back: {error}")
    return postconditions.Verdict(checked, read.expect(outcome))


async def _ledger_results(fresh: Sequence[Mapping[str, Any]], services: Services) -> dict[str, tuple[dict[str, Any], Any]]:
    """(arguments sent, structured result) of the fresh side-effecting calls that completed, from the ledger."""
    if not any(obs.get("side_effect") and obs["status"] == "ok" for obs in fresh):
        return {}
    entries = await store.run_ledger(await services.pool(), current_run_id())
    return {entry.call_id: (entry.result.get("arguments") or {}, entry.result.get("structured"))
            for entry in entries if entry.status == "COMPLETE" and isinstance(entry.result, dict)}


def _tool_texts(messages: list[Any], wanted: set[str]) -> dict[str, str]:
    """What the model was shown for each wanted call."""
    texts: dict[str, str] = {}
    for message in reversed(messages):
        if len(texts) == len(wanted):
            break
        if isinstance(message, ToolMessage) and message.tool_call_id in wanted:
            texts[message.tool_call_id] = str(message.content)
    return texts


def _span(observations: Sequence[Mapping[str, Any]]) -> float:
    """Wall time of a wave of parallel calls: first start to last end, not the sum."""
    if not observations:
        return 0.0
    return max(obs["ended_at"] for obs in observations) - min(obs["started_at"] for obs in observations)
