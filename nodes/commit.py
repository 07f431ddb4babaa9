"""commit: decide from confidence whether the result commits, needs review, or is rejected,
and seal it with a SHA-256 content hash and a provenance record.
"""

from __future__ import annotations

import hashlib
from typing import Any

from graph.services import Services
from graph.status import Terminal, ending

REPAIR_PENALTY = 0.05
"""Confidence lost per repair pass: an output that needed repairs is trusted a little less."""


async def commit(state: dict[str, Any], services: Services) -> dict[str, Any]:
    quality = dict(state.get("quality") or {})
    output = quality.get("verification", {}).get("output", "")
    repairs = len(quality.get("repairs", []))
    confidence = round(max(quality.get("critique", {}).get("weighted", 0.0) - REPAIR_PENALTY * repairs, 0.0), 4)
    quality["confidence"] = confidence
    settings = state["settings"]
    if quality.get("accepted_by"):
        code, reason = Terminal.SUCCESS, f"committed at confidence {confidence}, accepted by {quality['accepted_by']} when the verifier and the critic disagreed"
    elif confidence >= settings.get("commit_threshold", 0.8):
        code, reason = Terminal.SUCCESS, f"committed with confidence {confidence}"
    elif confidence >= settings.get("review_threshold", 0.5):
        code, reason = Terminal.REVIEW_REQUIRED, f"confidence {confidence} is in the review band"
    else:
        code, reason = Terminal.LOW_CONFIDENCE, f"confidence {confidence} is below the review threshold"
    observations = state.get("observations", [])
    result = {
        "output": output,
        "sha256": hashlib.sha256(output.encode()).hexdigest(),
        "confidence": confidence,
        "provenance": {
            "task_hash": state["boundary"]["task_hash"],
            "plan_hash": (state.get("plan") or {}).get("hash"),
            "tool_calls": [
                {key: obs.get(key) for key in ("call_id", "tool", "args_hash", "status", "stage", "sha256")}
                for obs in observations
            ],
            "repairs": quality.get("repairs", []),
            "scores": quality.get("critique", {}).get("scores", {}),
            "model": state["boundary"]["model"],
            "prompt_version": state["boundary"]["prompt_version"],
            "policy_hash": state["boundary"]["policy_hash"],
        },
    }
    committed = [{"call_id": obs["call_id"], "stage": "committed"} for obs in observations if obs.get("stage") == "verified"] if code == Terminal.SUCCESS else []
    return {
        "quality": quality,
        "result": result,
        "observations": committed,
        "ending": ending(code, reason, "" if code == Terminal.SUCCESS else "Review the result and accept or reject it."),
        "status": {"phase": "commit"},
    }
