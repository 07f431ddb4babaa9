"""repair: turn the verifier's and critic's findings into feedback for the actor — within bounds.

A final answer given while a required plan step is not done comes here straight from act (the
completion check, before any judge): the feedback is then the unfinished steps and why.
Ends the run instead of spinning: when the repair budget is spent (VALIDATION_FAIL, with the
diagnosis) or when the same failure has now been seen three times (REPEATED_FAILURE).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain_core.messages import HumanMessage

from graph.budget import Budget
from graph.plan import describe_unfinished, unfinished
from graph.services import Services
from graph.status import Terminal, ending

REPEAT_LIMIT = 3
FEEDBACK = "Your answer did not pass review. Fix these problems, using tools where needed, then give a new final answer:\n{items}"


async def repair(state: dict[str, Any], services: Services) -> dict[str, Any]:
    quality = dict(state.get("quality") or {})
    problems = describe_unfinished(unfinished((state.get("plan") or {}).get("steps", []))) or diagnosis(quality)
    signature = hashlib.sha256(json.dumps(sorted(problems)).encode()).hexdigest()[:16]
    signatures = [*quality.get("failure_signatures", []), signature]
    quality["failure_signatures"] = signatures
    update: dict[str, Any] = {"quality": quality, "status": {"phase": "repair"}}
    budget = Budget.model_validate(state["budget"])
    used = state["usage"].get("repairs", 0)
    if signatures.count(signature) >= REPEAT_LIMIT:
        update["ending"] = ending(Terminal.REPEATED_FAILURE, f"the same failure {REPEAT_LIMIT} times: " + "; ".join(problems),
                                  "Change the approach or the task; repeating the same repair will not help.")
    elif budget.repairs is not None and used >= budget.repairs:
        update["ending"] = ending(Terminal.VALIDATION_FAIL, f"output still fails after {used} repair(s): " + "; ".join(problems),
                                  f"Review the partial output, or allow more repairs (--budget repairs={used + 1}).")
    else:
        quality["repairs"] = [*quality.get("repairs", []), {"signature": signature, "problems": problems}]
        update["messages"] = [HumanMessage(FEEDBACK.format(items="\n".join(f"- {problem}" for problem in problems)))]
        update["usage"] = {"repairs": 1}
    return update


def diagnosis(quality: dict[str, Any]) -> list[str]:
    """The verifier's failures and the critic's defects, as one list of actionable lines."""
    lines = [f"{failure['criterion']}: {failure['reason']}" for failure in quality.get("verification", {}).get("failures", [])]
    critique = quality.get("critique", {})
    lines += [f"{name} below its minimum ({critique.get('scores', {}).get(name)})" for name in critique.get("below_minimum", [])]
    lines += [
        f"{defect.get('location') or 'output'}: {defect['problem']}" + (f" (hint: {defect['repair_hint']})" if defect.get("repair_hint") else "")
        for defect in critique.get("defects", [])
    ]
    return lines or ["the output failed review without a stated reason"]
