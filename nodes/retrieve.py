"""retrieve: run the plan's read-only evidence steps, in parallel, and keep each result with its source.

Evidence calls pass the same gate as the actor's calls (a plan cannot smuggle a write in here:
validate_plan already refused non-read-only evidence tools, and policy still decides each call).
Their results are not part of the actor's conversation; the actor sees them in its brief. After a
re-plan only the evidence steps not yet retrieved run (graph/core/plan.py `evidence_to_fetch`); the evidence kept stays.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from boundloop.graph.core.budget import Budget, add_usage, result_chars_share
from boundloop.graph.core.records import Observation, Step, Usage
from boundloop.graph.core.plan import evidence_to_fetch
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.nodes.calls import run_call
from boundloop.tools import gateway


async def retrieve(state: LoopState, services: Services) -> LoopUpdate:
    steps = evidence_to_fetch(state["plan"]["steps"], state.get("evidence"))
    budget = Budget.model_validate(state["budget"])
    prefix = f"r{len(state['plan'].get('revisions', []))}" if state["plan"].get("revisions") else "r"  # call ids stay unique across re-plans
    ids = {step["id"]: f"{prefix}.{step['id']}" for step in steps}
    proposed = [
        gateway.ProposedCall(call_id=ids[step["id"]], tool_call_id=f"retrieve:{ids[step['id']]}", name=step["evidence"]["tool"], args=step["evidence"]["args"])  # type: ignore[index]  # evidence_to_fetch keeps steps with evidence
        for step in steps
    ]
    admissions = await gateway.admit_all(
        proposed,
        registry=await services.registry(current_run_id(), state["settings"], state.get("tools")),
        rules=gateway.run_policy(state["settings"], state["task"]["profile"]),
        budget=budget,
        usage=state["usage"],
        breaker_state=state.get("breakers") or {},
        now=time.time(),
    )
    limit = asyncio.Semaphore(budget.parallel_calls)
    retries_left = _retries_left(state, budget)

    async def run(admission: gateway.Admission) -> dict[str, Any]:
        if admission.verdict != "admit":
            detail = admission.message if admission.verdict != "ask" else "evidence calls never wait for approval: " + admission.message
            return {"observations": [{**admission.call, "tool": admission.call["name"], "phase": "retrieve", "stage": "intended",
                                      "status": "denied" if admission.verdict == "ask" else admission.verdict, "detail": detail}]}
        async with limit:
            payload = {"settings": state["settings"], "profile": state["task"]["profile"], "tools": state.get("tools"),
                       "retries_left": retries_left, "result_chars_left": result_chars_share(state["usage"], budget, len(admissions))}
            update = await run_call(admission.call, payload, services, phase="retrieve")
        return {**update, "usage": add_usage(update["usage"], admission.reservation)}

    updates = await asyncio.gather(*(run(admission) for admission in admissions))
    observations = [obs for update in updates for obs in update["observations"]]
    usage: Usage = {}
    for update in updates:
        usage = add_usage(usage, update.get("usage"))
    verified = {obs["call_id"] for obs in observations if obs["status"] == "ok"}
    evidence = [
        {"step_id": step["id"], "call_id": ids[step["id"]], "tool": step["evidence"]["tool"], "ok": ids[step["id"]] in verified}  # type: ignore[index]  # as above
        for step in steps
    ]
    plan_steps: list[Step] = [
        {**step, "status": "done"} if ids.get(step["id"]) in verified else step
        for step in state["plan"]["steps"]
    ]
    grounded: list[Observation] = [{**obs, "stage": "verified", "grounded": True} if obs["status"] == "ok" else {**obs, "grounded": True} for obs in observations]
    return {
        "observations": grounded,
        "evidence": [*(state.get("evidence") or []), *evidence],
        "usage": usage,
        "plan": {**state["plan"], "steps": plan_steps},
        "status": {"phase": "retrieve"},
    }


def _retries_left(state: LoopState, budget: Budget) -> int:
    return 2 if budget.retries is None else min(2, budget.retries - state["usage"].get("retries", 0))
