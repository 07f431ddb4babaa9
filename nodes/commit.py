"""commit: decide from confidence whether the result commits, needs review, or is rejected,
and seal it with a SHA-256 content hash and a provenance record: what the result rests on (task,
plan, tool calls, repairs, scores, model, prompts, policy), when it was committed, who approved
what, and what verification decided, with the SHA-256 of the record itself.

Confidence and the approval triggers are graph/quality/confidence.py's: a result above the commit threshold
still goes to review when a trigger holds (an irreversible effect no human approved, a low safety
score, a task that asks for approval).

Refuses to commit while a required plan step is pending or failed (the completion check, the
same one the act→verify edge applies): VALIDATION_FAIL, whatever the judge and critic said.
A result whose optional steps did not finish commits as PARTIAL_SUCCESS, listing them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from boundloop.graph.quality.confidence import estimate, review_triggers, signals_of
from boundloop.graph.core.plan import describe_unfinished, unfinished
from boundloop.graph.services import Services
from boundloop.graph.core.records import Observation, Quality
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate


async def commit(state: LoopState, services: Services) -> LoopUpdate:
    quality: Quality = {**(state.get("quality") or {})}
    output = quality.get("verification", {}).get("output", "")
    signals = signals_of(state)
    confidence = estimate(signals)
    triggers = review_triggers(state)
    quality.update({"confidence": confidence, "confidence_signals": asdict(signals), "review_triggers": triggers})
    settings = state["settings"]
    steps = (state.get("plan") or {}).get("steps", [])
    missing, secondary = describe_unfinished(unfinished(steps)), describe_unfinished(unfinished(steps, optional=True))
    if missing:
        code, reason = Terminal.VALIDATION_FAIL, "commit refused, the plan is not complete: " + "; ".join(missing)
    elif quality.get("accepted_by"):
        code, reason = Terminal.SUCCESS, f"committed at confidence {confidence}, accepted by {quality['accepted_by']} when the verifier and the critic disagreed"
    elif confidence >= settings.get("commit_threshold", 0.8) and not triggers:
        code, reason = Terminal.SUCCESS, f"committed with confidence {confidence}"
    elif confidence >= settings.get("commit_threshold", 0.8):
        code, reason = Terminal.REVIEW_REQUIRED, f"confidence {confidence}, but a human must see it: " + "; ".join(triggers)
    elif confidence >= settings.get("review_threshold", 0.5):
        code, reason = Terminal.REVIEW_REQUIRED, f"confidence {confidence} is in the review band"
    else:
        code, reason = Terminal.LOW_CONFIDENCE, f"confidence {confidence} is below the review threshold"
    observations = state.get("observations", [])
    result = {
        "kind": "result",  # finalize keeps it when the run commits, else replaces it with a failure report
        "output": output,
        "sha256": hashlib.sha256(output.encode()).hexdigest(),
        "confidence": confidence,
        "provenance": {
            "task_hash": state["boundary"]["task_hash"],
            "plan_hash": (state.get("plan") or {}).get("hash"),
            "tool_calls": [
                {key: obs.get(key) for key in ("call_id", "tool", "args_hash", "status", "stage", "sha256", "step_id", "postcondition")}
                for obs in observations
            ],
            "repairs": quality.get("repairs", []),
            "scores": quality.get("critique", {}).get("scores", {}),
            "model": state["boundary"]["model"],
            "prompt_version": state["boundary"]["prompt_version"],
            "policy_hash": state["boundary"]["policy_hash"],
            "committed_at": datetime.now(timezone.utc).isoformat(),
            "approvers": [{key: record.get(key) for key in ("call_id", "decision", "approver")}
                          for record in state.get("approvals", []) if record.get("decision")],
            "verification": _verdict(quality),
        },
    }
    result["provenance"]["sha256"] = _digest(result["provenance"])
    if code == Terminal.SUCCESS and secondary:
        code, reason = Terminal.PARTIAL_SUCCESS, f"{reason}; secondary steps not done: " + "; ".join(secondary)
        result["unresolved"] = secondary
    commits = code in (Terminal.SUCCESS, Terminal.PARTIAL_SUCCESS)
    committed: list[Observation] = [{"call_id": obs["call_id"], "stage": "committed"} for obs in observations if obs.get("stage") == "verified"] if commits else []
    return {
        "quality": quality,
        "result": result,
        "observations": committed,
        "ending": ending(code, reason, NEXT_SAFE_ACTION.get(code, "Review the result and accept or reject it.")),
        "status": {"phase": "commit"},
    }


def _verdict(quality: Quality) -> dict[str, Any]:
    """What verification decided, as the provenance keeps it: passed or not, and what failed."""
    verification = quality.get("verification") or {}
    return {"passed": verification.get("passed"), "failures": [failure.get("criterion") for failure in verification.get("failures", [])],
            "accepted_by": quality.get("accepted_by")}


def _digest(record: dict[str, Any]) -> str:
    """SHA-256 of the record's canonical JSON (sorted keys), so anyone holding it can check it."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


NEXT_SAFE_ACTION = {
    Terminal.SUCCESS: "",
    Terminal.PARTIAL_SUCCESS: "Use the result; finish the unresolved steps separately or run again for them.",
    Terminal.VALIDATION_FAIL: "Finish the unfinished steps (the run's side effects were rolled back), or change the plan.",
}
