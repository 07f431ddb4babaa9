"""guards: the conditional edges. Pure, deterministic functions of the checkpointed state.

Every edge first asks whether the run must stop (a node's ending, a tripwire — the safety
breaker, a denied step, a loop of identical failures, conflicting sources (graph/tripwires.py) —
or a budget that the next step would break). A stop goes to `escalate` when a human can resolve
it (missing information, an ambiguous task, a budget that could be extended, a result to review)
and the run is attended; otherwise to `finalize`. Only then does the edge pick the next phase. Routes that fan out return
one `Send` per tool call, so each call is its own task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage
from langgraph.types import Send

from boundloop.graph.context import memory
from boundloop.graph import schedule, sends
from boundloop.graph.core.budget import Budget, check_before_model_call, check_before_step, result_chars_share
from boundloop.graph.core.deadline import budget_left_s
from boundloop.graph.calls.hosted import approval_requests
from boundloop.graph.core.plan import evidence_to_fetch, unfinished
from boundloop.graph.core.status import Terminal
from boundloop.graph.core.records import Approval
from boundloop.graph.quality import proportion
from boundloop.graph.state import LoopState
from boundloop.graph.tripwires import tripped

Stop = Literal["escalate", "finalize"]
ASK_A_HUMAN = frozenset({Terminal.MISSING_INFO, Terminal.AMBIGUOUS_INTENT, Terminal.REVIEW_REQUIRED, Terminal.BUDGET_EXHAUSTED, Terminal.TIMEOUT})
"""Endings a person can resolve: answer, extend, or review."""


def _budget(state: LoopState) -> Budget:
    return Budget.model_validate(state["budget"])


def must_stop(state: LoopState) -> bool:
    usage = state.get("usage", {})
    return bool(state.get("ending")) or tripped(state) is not None or check_before_step(usage, _budget(state)) is not None


def may_call_model(state: LoopState) -> bool:
    return not must_stop(state) and check_before_model_call(state.get("usage", {}), _budget(state)) is None


def stop(state: LoopState) -> Stop:
    """Where a stopping run goes: a human who can resolve it, or the end."""
    if state.get("settings", {}).get("unattended") or "budget" not in state:
        return "finalize"
    if not state.get("ending") and tripped(state):
        return "finalize"  # a tripwire is no budget to extend: nobody can answer it away
    ending: Mapping[str, Any] = state.get("ending") or {}
    if ending.get("escalation") == "repair_review":
        return "escalate" if _escalations_left(state) else "finalize"  # repairs ran out: a human may accept the best output
    code = ending.get("code") or _exhausted_code(state)
    return "escalate" if code in ASK_A_HUMAN and _escalations_left(state) else "finalize"


def _escalations_left(state: LoopState) -> bool:
    limit = _budget(state).escalations
    return limit is None or state["usage"].get("escalations", 0) < limit


def _exhausted_code(state: LoopState) -> str | None:
    usage, budget = state.get("usage", {}), _budget(state)
    exhaustion = check_before_model_call(usage, budget) or check_before_step(usage, budget)
    return None if exhaustion is None else exhaustion.code


def route_after_intake(state: LoopState) -> Literal["plan", "validate_plan", "escalate", "finalize"]:
    """To the planner when intake decided the task needs one; else its implicit plan goes straight to validation."""
    if "budget" not in state or must_stop(state):
        return stop(state)
    if state["control"]["planning"]["plan"]:
        return "plan" if may_call_model(state) else stop(state)
    return "validate_plan"


def route_after_plan(state: LoopState) -> Literal["validate_plan", "escalate", "finalize"]:
    return stop(state) if must_stop(state) else "validate_plan"


def route_after_validate(state: LoopState) -> Literal["plan", "retrieve", "act", "escalate", "finalize"]:
    if must_stop(state):
        return stop(state)
    plan = state["plan"]
    if not plan.get("valid"):
        return "plan" if may_call_model(state) and proportion.planning_allowed(state) else stop(state)
    if state["task"].get("require_plan_approval") and not plan.get("approved"):
        return "escalate" if not state["settings"].get("unattended") else "finalize"
    return after_plan_accepted(state)


def after_plan_accepted(state: LoopState) -> Literal["retrieve", "act", "escalate", "finalize"]:
    if evidence_to_fetch(state["plan"]["steps"], state.get("evidence")):
        return "retrieve"
    return "act" if may_call_model(state) else stop(state)


def route_after_retrieve(state: LoopState) -> Literal["act", "escalate", "finalize"]:
    return "act" if may_call_model(state) else stop(state)


def needs_gate(state: LoopState) -> bool:
    """The actor's reply, just merged into `state`, proposes calls to decide, and the run goes on.
    act's node asks this before it gates (nodes/act.py); an approval request of a provider-side
    connector is gated like a call."""
    if must_stop(state) or (state.get("context") or {}).get("pressure"):
        return False
    last = state["messages"][-1]
    return isinstance(last, AIMessage) and bool(last.tool_calls or last.invalid_tool_calls or approval_requests(last))


def route_after_act(state: LoopState) -> list[Send] | list[str] | Literal["compact", "approve", "execute", "act", "plan", "verify", "repair", "escalate", "finalize"]:
    """The gate decided the reply's calls in act's step, or act grounded results while the turn goes
    on: dispatch, approve, re-plan or stop as the turn requires. Otherwise the reply was a final
    answer, or the run stops, or its context needs room."""
    if (state.get("status") or {}).get("gated"):
        return route_tool_calls(state)
    if must_stop(state):
        return stop(state)
    if (state.get("context") or {}).get("pressure"):
        return "compact"  # the context pressure gate: act did not call, its request was over the threshold
    if unfinished((state.get("plan") or {}).get("steps", [])):
        return "repair"  # the completion check: a final answer with a required step not done never reaches the judge
    needs_judge = proportion.judged_criteria(state) is not None
    if needs_judge and may_call_model(state) and proportion.beside_judge(state):
        return ["verify", "critique"]  # one step: the judge and the critic at once, weigh settles both
    return "verify" if not needs_judge or may_call_model(state) else stop(state)


def route_tool_calls(state: LoopState) -> list[Send] | Literal["act", "plan", "escalate", "finalize"]:
    """After act's gate or its grounding: every approval of the turn first, then the dispatch waves in
    order (an approved call in its place, with the arguments it was approved with; a rejected or
    answered one left out), then the planner when a step asks for a re-plan, else the actor."""
    asks = [call for call in state.get("approvals", []) if "reservation" in call and not _decided(state, call)]
    if asks:
        return [sends.send("approve", call) for call in asks]
    decided = _decisions(state)
    for wave in state.get("dispatch") or []:
        if runnable := [ready for call in wave if (ready := _runnable(call, decided)) is not None]:
            return [sends.send("execute", call) for call in runnable]
    return _next_model_step(state)


def _next_model_step(state: LoopState) -> Literal["plan", "act", "escalate", "finalize"]:
    """The planner when a re-plan is pending (a stuck step, a repair's REPLAN), else the actor."""
    if not may_call_model(state):
        return stop(state)
    return "plan" if (state.get("plan") or {}).get("replan") else "act"


def _decisions(state: LoopState) -> dict[str, Approval]:
    """The human decisions made on the run's approvals, by call id."""
    return {entry["call_id"]: entry for entry in state.get("approvals", []) if "decision" in entry}


def _runnable(call: dict[str, Any], decided: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The call as it runs: as admitted, as approved (edits included), or None when it does not run."""
    if not call.get("ask"):
        return call
    decision = decided.get(call["call_id"], {})
    if not decision.get("run"):
        return None
    return {**call, "args": decision.get("args", call["args"]), "args_hash": decision.get("args_hash", call["args_hash"])}


def route_after_compact(state: LoopState) -> Literal["act", "escalate", "finalize"]:
    return "act" if may_call_model(state) else stop(state)


def route_after_verify(state: LoopState) -> Literal["critique", "weigh", "commit", "escalate", "finalize"]:
    """To the critic when verify's recorded decision says it runs (a trigger, or a profile that asks); else a
    verified output goes to commit. A failed verification always triggers the critic (graph/quality/proportion.py).
    Beside the critic, to weigh, which settles both (and stops the run if either step ended it)."""
    if (control := state.get("control")) and control["critique"].get("beside_judge"):
        return "weigh"
    if must_stop(state):
        return stop(state)
    if proportion.critique_runs(state):
        return "critique" if may_call_model(state) else stop(state)
    return "commit"


def route_after_critique(state: LoopState) -> Literal["weigh", "commit", "repair", "escalate", "finalize"]:
    """Beside the judge, to weigh; else on the critic's scores, or to a human when critic and verifier disagree."""
    if "pending" in state["quality"]["critique"]:
        return "weigh"
    return route_after_weigh(state)


def route_after_weigh(state: LoopState) -> Literal["commit", "repair", "escalate", "finalize"]:
    """On the settled critique: commit what passed, a human when critic and verifier disagree, else repair."""
    if must_stop(state):
        return stop(state)
    critique = state["quality"]["critique"]
    if critique["passed"]:
        return "commit"
    if critique.get("disagree") and not state["settings"].get("unattended") and _escalations_left(state):
        return "escalate"
    return "repair"


def route_after_repair(state: LoopState) -> Literal["plan", "act", "escalate", "finalize"]:
    """To the planner when the repair strategy is REPLAN (nodes/repair.py), else back to the actor."""
    return _next_model_step(state)


def route_after_commit(state: LoopState) -> Literal["remember", "escalate", "finalize"]:
    """A committed result whose answer proposes memories goes through the memory write gate; nothing
    else ever reaches it. One that proposes none goes to the end: the gate would have nothing to judge,
    and a step is a checkpoint."""
    ending = state["ending"]
    assert ending is not None, "commit ends the run one way or another"
    if ending["code"] not in (Terminal.SUCCESS, Terminal.PARTIAL_SUCCESS):
        return stop(state)
    return "remember" if memory.proposed(state.get("messages", [])) else "finalize"


def route_after_escalate(state: LoopState) -> Literal["plan", "retrieve", "act", "commit", "repair", "escalate", "finalize"]:
    """Back to where the human's answer lets the run continue, or to the end if they declined."""
    if state.get("ending"):
        return "finalize"
    target = state["status"].get("resume_to")
    if target == "accepted_plan":
        return after_plan_accepted(state)
    if target in ("plan", "act") and not may_call_model(state):
        return stop(state)
    return target or "finalize"


def _decided(state: LoopState, call: Mapping[str, Any]) -> bool:
    return any(entry.get("call_id") == call["call_id"] and "decision" in entry for entry in state.get("approvals", []))


def task_payload(state: LoopState, node: str, call_id: str) -> dict[str, Any]:
    """What the `node` task sent for call `call_id` gets, from the state its step starts from
    (graph/sends.py): the call as `route_tool_calls` sent it (approved arguments included), its
    run's pinned tools, settings and profile, and what it may still spend."""
    calls: Sequence[Mapping[str, Any]]
    if node == "approve":
        calls = [entry for entry in state.get("approvals", []) if "reservation" in entry]
    else:
        decided = _decisions(state)
        calls = [ready for wave in state.get("dispatch") or [] for call in wave if (ready := _runnable(call, decided)) is not None]
    call = next((call for call in calls if call["call_id"] == call_id), None)
    if call is None:
        raise RuntimeError(f"the {node} task of call {call_id!r} finds no such call to run in the run's state; a guard is wrong")
    budget = _budget(state)
    decided = _decisions(state)
    together = (len([entry for entry in state.get("approvals", []) if "reservation" in entry])
                + len([call for wave in state.get("dispatch") or [] for call in wave if _runnable(call, decided) is not None]))
    retries_left = 2 if budget.retries is None else min(2, budget.retries - state["usage"].get("retries", 0))
    return {
        "call": call,
        "settings": state["settings"],
        "tools": state.get("tools"),
        "profile": state["task"]["profile"],
        "retries_left": retries_left,
        "usage": state["usage"],
        "budget": state["budget"],
        "policy_hash": (state.get("boundary") or {}).get("policy_hash"),
        "breakers": state.get("breakers"),
        "wall_clock_left_s": budget_left_s(state["budget"], state["usage"]),
        "result_chars_left": result_chars_share(state["usage"], budget, together),  # every call that may run in this step gets a share
        "unmet": _unmet(state, call),
    }


def _unmet(state: LoopState, call: Mapping[str, Any]) -> str | None:
    """The refusal for a call held for a later wave whose dependency is still not done (else None)."""
    steps = (state.get("plan") or {}).get("steps", [])
    missing = schedule.missing_dependencies(steps, call.get("step_id"))
    return schedule.refusal(steps, call["name"], call["step_id"], missing) if missing else None
