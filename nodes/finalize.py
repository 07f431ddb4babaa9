"""finalize: the only way to END. Writes exactly one terminal status and the terminal artifact.

The artifact is the committed result with provenance (SUCCESS; PARTIAL_SUCCESS adds the
unresolved steps), or a failure report with the diagnosis, the partial output (when repairs gave
up, the loop's best-scoring output, not merely the last; graph/quality/convergence.py) and the next safe
action, or a halt record. The ending is a node's, else a tripwire's (graph/tripwires.py), else a
budget's. A quality or safety failure rolls the run's side effects back first
(nodes/_rollback.py) and lists what needs a person; a safety ending also writes its evidence —
the results that carried instructions and every refused attempt — to the trace.
Also releases the run's tool servers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boundloop.checkpoints import store
from boundloop.graph import safety
from boundloop.graph.core.budget import Budget, check_before_model_call, check_before_step
from boundloop.graph.core.records import Ending
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.graph.tripwires import tripped
from boundloop.nodes._rollback import ROLLS_BACK, roll_back
from boundloop.nodes.verify import final_answer


async def finalize(state: LoopState, services: Services) -> LoopUpdate:
    outcome = state.get("ending") or tripped(state) or budget_ending(state)
    if fallbacks := (state.get("usage") or {}).get("fallbacks_by_role"):
        outcome = {**outcome, "degraded": degraded(fallbacks)}
    code = Terminal(outcome["code"])
    committed = code in (Terminal.SUCCESS, Terminal.PARTIAL_SUCCESS)
    artifact = {**state["result"], "kind": "result"} if committed else failure_report(state, outcome)
    run_id = current_run_id()
    if code in (Terminal.UNSAFE_DETECTION, Terminal.PERMISSION_DENIED):
        artifact["evidence"] = safety.evidence(state)
        await store.append_trace(await services.pool(), run_id, "safety", node="finalize", data={"code": code.value, **artifact["evidence"]})
    if code in ROLLS_BACK:
        compensations = await roll_back(run_id, state["settings"], services, state.get("tools"))
        artifact["compensations"] = compensations
        artifact["manual_action_required"] = [item for item in compensations if item["status"] in ("manual_action_required", "failed")]
        if compensations:
            await store.append_trace(await services.pool(), run_id, "compensation", node="finalize", data={"outcomes": compensations})
    await services.close_run(run_id)
    update: LoopUpdate = {"ending": outcome, "status": {"phase": "finalize", "terminal": code.value}}
    if artifact != state.get("result"):  # commit's result is written once: a whole copy per write
        update["result"] = artifact
    return update


def degraded(fallbacks: Mapping[str, int]) -> str:
    """How the run ran degraded: which roles called their fallback model, how often."""
    return "ran degraded: " + "; ".join(f"the {role} called its fallback model {count} time(s)" for role, count in sorted(fallbacks.items()))


def failure_report(state: Mapping[str, Any], outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact of a run that did not succeed: a failure report, or a halt record for USER_CANCEL."""
    code = Terminal(outcome["code"])
    # A repair loop that gave up keeps its best-scoring output; any other ending keeps the newest answer.
    best = ((state.get("quality") or {}).get("best") or {}) if outcome.get("escalation") == "repair_review" else {}
    return {
        "kind": "halt" if code == Terminal.USER_CANCEL else "failure",
        "code": code.value,
        "reason": outcome["reason"],
        "next_safe_action": outcome.get("next_safe_action", ""),
        "diagnosis": (state.get("quality") or {}).get("verification", {}).get("failures", []),
        "partial_output": (state.get("result") or {}).get("output") or best.get("output") or final_answer(state),
        **({"best": {"iteration": best["iteration"], "score": best["score"]}} if best else {}),
        "side_effects": [obs["call_id"] for obs in state.get("observations", []) if obs.get("side_effect") and obs.get("status") == "ok"],
    }


def budget_ending(state: LoopState) -> Ending:
    """Why a guard routed here without a node's ending: a budget that would be broken next."""
    budget = Budget.model_validate(state["budget"])
    exhaustion = check_before_model_call(state.get("usage", {}), budget) or check_before_step(state.get("usage", {}), budget)
    if exhaustion is None:
        raise RuntimeError("finalize reached with no ending and no exhausted budget; a guard is wrong")
    return ending(exhaustion.code, exhaustion.message, exhaustion.next_safe_action, dimension=exhaustion.dimension)
