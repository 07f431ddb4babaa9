"""goal_check: every N actor turns, is the run still moving toward its objective? Is the objective
still valid, and what evidence proves progress?

Owns the check and its record; never routes. At the start of actor turn T, T a multiple of
`goal_check_every`, the act node calls `before_turn` (a model may be called in a node, never in a
guard). It judges the window of turns T-N..T-1 by:

- the deterministic signals: new verified observations of the actor's calls, plan steps those calls
  completed, repair iterations that beat the best quality score before them;
- the `goal_check` model role's verdict, asked once (no re-ask: the check is meant to be cheap) and
  charged like every call: is the objective still valid, which of the window's calls show progress.

The decision, in this order: no signal at all → `no_progress`, which the tripwire `no_progress`
turns into REPEATED_FAILURE on every guard (nobody can answer a lack of progress away); the model
says the objective no longer holds → `objective_invalid`, ending AMBIGUOUS_INTENT — a model's
judgement is not proof that the goal cannot be met (IMPOSSIBLE), it is a reason to hand the goal back:
an attended run asks a human to restate it (graph/guards.py `stop`), an unattended one fails closed;
otherwise `continue`. The model can end a run but never rescue one: evidence it cites counts only
where it names a verified observation of the window, and only the signals say whether there was
progress. A malformed, empty, hung or missing reply is recorded as no verdict, and so is a question
the budget could not afford (skipped before anything is sent); the signals decide alone then.

The record — window, signals, verdict, decision — is checkpointed in `goal_check` (the guards read
it) and written to the trace with the act node's event (graph/trace/record.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field, StrictBool

from boundloop.graph.models import size
from boundloop.graph.core.budget import Budget, add_usage, check_before_model_call
from boundloop.graph.quality.convergence import MIN_GAIN
from boundloop.graph.core.errors import ScriptExhausted
from boundloop.graph.core.records import Ending
from boundloop.graph.models.catalog import NoReply, call_model, model_id
from boundloop.graph.models.prompts import GOAL_CHECK, task_brief
from boundloop.graph.core.replies import parse_reply
from boundloop.graph.services import Services
from boundloop.graph.state import LoopUpdate
from boundloop.graph.core.status import Terminal, ending

ROLE = "goal_check"
_ACT_CALL = re.compile(r"^a(\d+)\.")
"""Actor call ids are `a<turn>.<position>` (nodes/gate.py); the turn counts from 0."""
NO_PROGRESS, OBJECTIVE_INVALID, CONTINUE = "no_progress", "objective_invalid", "continue"


class GoalVerdict(BaseModel):
    """The goal_check role's reply. StrictBool: a "no" or a 0 is a malformed reply, not a verdict."""

    objective_valid: StrictBool
    reason: str = Field(default="", max_length=2_000)
    evidence: list[str] = Field(default_factory=list, max_length=200)


@dataclass(frozen=True)
class Checked:
    update: LoopUpdate = field(default_factory=LoopUpdate)
    """What the check recorded and spent ({} when none was due); the actor's call is charged on top."""
    stops: bool = False
    """The run ends here: the actor is not asked this turn."""


async def before_turn(state: Mapping[str, Any], services: Services) -> Checked:
    """The goal check due at the start of this actor turn, if any (see the module docstring)."""
    window = due(state)
    if window is None:
        return Checked()
    first, last = window
    progress = signals(state, first, last)
    update, model = await _ask(state, services, first, last)
    verdict = model.get("verdict")
    if not any(progress.values()):
        decision = NO_PROGRESS
        update.pop("ending", None)  # the tripwire's ending is final; a budget the question ran out is beside the point
    elif verdict is not None and not verdict["objective_valid"]:
        decision = OBJECTIVE_INVALID
        update.setdefault("ending", ending(
            Terminal.AMBIGUOUS_INTENT,
            f"the goal check after actor turn {last + 1} found the objective no longer valid: {verdict['reason'] or 'no reason given'}",
            "Restate the objective (or confirm it, saying why it still holds) and run again; the work so far is kept.",
        ))
    else:
        decision = CONTINUE
    stops = decision != CONTINUE or "ending" in update  # "ending" alone: the question's spend ran a budget out
    return Checked({**update, "goal_check": _record(first, last, progress, model, decision)}, stops=stops)


def due(state: Mapping[str, Any]) -> tuple[int, int] | None:
    """The window (first, last actor turn) to check before the next turn, or None. Every call of the
    window has run and been observed by the time the next turn starts; a window is checked once."""
    every = (state.get("settings") or {}).get("goal_check_every", 10)
    turns = (state.get("usage") or {}).get("calls_by_role", {}).get("actor", 0)
    if every <= 0 or turns == 0 or turns % every or (state.get("goal_check") or {}).get("window", [None, None])[1] == turns - 1:
        return None
    return turns - every, turns - 1


def no_progress(state: Mapping[str, Any]) -> Ending | None:
    """The tripwire: REPEATED_FAILURE once a recorded goal check found a window without progress.
    A pure function of the checkpointed record, so every guard and finalize read the same verdict."""
    record = state.get("goal_check") or {}
    if record.get("decision") != NO_PROGRESS:
        return None
    first, last = record["window"]
    return ending(
        Terminal.REPEATED_FAILURE,
        f"goal check after actor turn {last + 1}: no progress in the last {last - first + 1} turns "
        f"(no new verified observation, no plan step done, no better repair score)",
        "Change the approach or the task, or split it; the objective was not getting closer and the rest of the budget was kept.",
    )


def signals(state: Mapping[str, Any], first: int, last: int) -> dict[str, int]:
    """Progress made by actor turns first..last: verified calls, plan steps they completed, repair gains."""
    verified = verified_calls(state, first, last)
    steps = [step for step in (state.get("plan") or {}).get("steps", [])
             if step.get("status") == "done" and set((step.get("verified") or {}).values()) & verified]
    scores = (state.get("quality") or {}).get("scores", [])
    gains = [entry for position, entry in enumerate(scores) if first < entry.get("turn", -1) <= last + 1
             and entry["score"] > max((earlier["score"] for earlier in scores[:position]), default=-1.0) + MIN_GAIN]
    return {"verified_observations": len(verified), "plan_steps_done": len(steps), "repair_gains": len(gains)}


def verified_calls(state: Mapping[str, Any], first: int, last: int) -> set[str]:
    return {obs["call_id"] for obs in state.get("observations", [])
            if obs.get("phase") == "act" and obs.get("stage") in ("verified", "committed") and _in(obs["call_id"], first, last)}


async def _ask(state: Mapping[str, Any], services: Services, first: int, last: int) -> tuple[LoopUpdate, dict[str, Any]]:
    """(the update the question cost, what the model said: `outcome`, `detail`, `verdict`)."""
    request = [SystemMessage(GOAL_CHECK), HumanMessage(_brief(state, first, last))]
    budget = Budget.model_validate(state["budget"])
    tokens, _ = size.measure(model_id(state["settings"]), request)
    # Asked only when the actor's call after it still fits: the check must not spend the turn it guards.
    if exhaustion := check_before_model_call(add_usage(state.get("usage"), {"model_turns": 1, "input_tokens": tokens}), budget):
        return {}, {"outcome": "skipped", "detail": f"not asked: the actor's call would not fit after it ({exhaustion.message})"}
    try:
        reply, update = await call_model(state, services, ROLE, request)
    except NoReply as failed:
        update = failed.update.copy()
        del update["ending"]
        if failed.ending["code"] == Terminal.TIMEOUT:
            update["ending"] = failed.ending  # the run's wall-clock budget is gone, not just this answer
        return update, {"outcome": "no_reply", "detail": failed.ending["reason"]}
    except ScriptExhausted as missing:  # a script written without goal_check steps: the signals decide
        return {}, {"outcome": "no_reply", "detail": str(missing)}
    if exhaustion := check_before_model_call(add_usage(state.get("usage"), update["usage"]), budget):
        update["ending"] = ending(exhaustion.code, exhaustion.message, exhaustion.next_safe_action, dimension=exhaustion.dimension)
    parsed, problem = parse_reply(str(reply.text), GoalVerdict)
    if parsed is None:
        return update, {"outcome": "malformed", "detail": str(problem)}
    real = verified_calls(state, first, last)
    cited = list(dict.fromkeys(parsed.evidence))
    verdict = {"objective_valid": parsed.objective_valid, "reason": parsed.reason,
               "evidence": [call for call in cited if call in real], "ignored_evidence": [call for call in cited if call not in real]}
    return update, {"outcome": "verdict", "detail": "", "verdict": verdict}


def _record(first: int, last: int, progress: dict[str, int], model: dict[str, Any], decision: str) -> dict[str, Any]:
    return {"window": [first, last], "signals": progress, "model": model, "decision": decision}


def _brief(state: Mapping[str, Any], first: int, last: int) -> str:
    """The task, the plan's progress and the window's calls: ids, tools and outcomes, no payloads."""
    steps = (state.get("plan") or {}).get("steps", [])
    plan = "\n".join(f"- [{step.get('status')}] {step.get('id')}: {step.get('description')}" for step in steps) or "(none)"
    calls = [f"- {obs['call_id']} {obs.get('tool')} -> {obs.get('status')} ({obs.get('stage')})"
             for obs in state.get("observations", []) if obs.get("phase") == "act" and _in(obs["call_id"], first, last)]
    task = {**state["task"], "clarifications": state.get("clarifications", [])}
    return "\n\n".join([task_brief(task), "Plan:\n" + plan,
                        f"Calls of actor turns {first + 1}-{last + 1}:\n" + ("\n".join(calls) or "(none)")])


def _in(call_id: str, first: int, last: int) -> bool:
    match = _ACT_CALL.match(call_id)
    return match is not None and first <= int(match.group(1)) <= last
