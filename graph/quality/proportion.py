"""proportion: which of the costly phases — the planner, the judge, the critic — a run enters, decided
deterministically from the task, its criteria, the profile and the run's settings, and recorded in the
state's `control` with the reason, so the checkpoint, the trace, `boundloop show` and the console say why
each phase ran or was skipped. Every phase stays a node; a run simply does not enter the ones it does
not need. The guards (graph/guards.py) route on the recorded decision.

Planning, decided at intake. `always` or `never` from the run's settings, else from the profile; `auto`
plans a complex task: two or more acceptance criteria, checks on two or more targets, two or more
numbered steps declared in the goal, or a plan a human must approve. Any other task runs on an implicit
one-step plan (the goal as the step, its criteria as `done_when`), which validate_plan checks like any
plan (budget lower bound) and a failed step or a REPLAN repair still sends to the planner for a targeted
re-plan — unless planning is `never`, which counts as no re-plans left.

The judge, decided at intake and applied by verify after the deterministic stages (output schema,
post-conditions, tests, artifact checks) passed: `always` judges every criterion; `auto` judges only
the criteria no check covers (a check covers the criterion it is named after), and none when there
is none left.

The critic, decided by verify once the verdict is in, on triggers only (`always` runs it anyway):
the verification failed or gave no verdict, judge samples disagreed, sources conflict, a tool call
failed, a side effect was not verified (its post-condition failed, or a human answered in its place), the output was repaired, a side effect ran that is irreversible or that the
policy held for a human's approval, or the confidence without a critic is below the commit threshold.
When the critic is sure to run whatever the verdict (it is asked for, or the run itself triggered it:
a failed call, an unverified or risky side effect, a repair) and the judge has criteria to check, the
two run at once, in one step: verify and critique side by side, each held to its share of what the
budget has left for model calls, and the next step (weigh) settles the critic's scores against the
verdict. Otherwise the critic, if it runs, follows verify, and its brief carries the verifier's findings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, cast

from boundloop.graph.core.budget import Budget, check_before_model_call, model_share
from boundloop.graph.core.records import Control, CritiqueDecision, PhaseMode as Mode, Plan, PlanningDecision, Step
from boundloop.graph.quality.confidence import estimate, signals_of
from boundloop.tools import kept_listing

PROFILE_MODES: dict[str, dict[str, Mode]] = {
    "sre_agent": {"planning": "always", "critique": "always"},
}
"""What a profile asks for beyond `auto`: an SRE run acts on production systems, so it plans first and is always critiqued."""
NUMBERED_STEP = re.compile(r"^\s*\d+[.)]\s+\S", re.MULTILINE)
FAILED_STATUSES = frozenset({"tool_error", "timeout", "server_unavailable", "unknown_after_crash"})
"""Tool call endings that are a failure of the call (a refusal before dispatch or a human's rejection is a decision, not a failure)."""


def decide(task: dict[str, Any], settings: dict[str, Any]) -> Control:
    """The `control` record intake writes: planning and judge decided now, the critic after verification."""
    profile = PROFILE_MODES.get(task.get("profile", ""), {})
    planning_mode = _mode("planning", settings, profile)
    judge_mode = _mode("judge", settings, profile)
    critique_mode = _mode("critique", settings, profile)
    criteria = list(task.get("acceptance_criteria") or [])
    covered = {check["name"].strip().casefold() for check in task.get("checks") or []}
    uncovered = criteria if judge_mode == "always" else [c for c in criteria if c.strip().casefold() not in covered]
    judged = judge_mode == "always" or bool(uncovered)
    return {
        "planning": _planning(planning_mode, task, settings, profile),
        "judge": {"mode": judge_mode, "run": judged, "criteria": uncovered, "reason": _judge_reason(judge_mode, criteria, uncovered, settings, profile)},
        "critique": {"mode": critique_mode, "run": None,
                     "reason": _asked("critique", settings, profile) if critique_mode == "always" else "decided after verification, on triggers"},
    }


def _mode(phase: str, settings: dict[str, Any], profile: dict[str, Mode]) -> Mode:
    return settings.get(phase) or profile.get(phase) or "auto"


def _asked(phase: str, settings: dict[str, Any], profile: dict[str, Mode]) -> str:
    return f"the run's settings ask for {phase}: {settings[phase]}" if settings.get(phase) else f"the profile asks for {phase}: {profile[phase]}"


def _planning(mode: Mode, task: dict[str, Any], settings: dict[str, Any], profile: dict[str, Mode]) -> PlanningDecision:
    if mode != "auto":
        return {"mode": mode, "plan": mode == "always", "reason": _asked("planning", settings, profile)}
    if complexity := complex_because(task):
        return {"mode": mode, "plan": True, "reason": "the task is complex: " + "; ".join(complexity)}
    return {"mode": mode, "plan": False, "reason": "a simple task: one implicit step (the goal, its criteria as done_when), no planner call"}


def complex_because(task: dict[str, Any]) -> list[str]:
    """Why the task needs a planner (empty: it does not)."""
    reasons = []
    if len(criteria := task.get("acceptance_criteria") or []) >= 2:
        reasons.append(f"{len(criteria)} acceptance criteria")
    if len(targets := {_target(check) for check in task.get("checks") or []}) >= 2:
        reasons.append(f"checks on {len(targets)} targets")
    if len(steps := NUMBERED_STEP.findall(task.get("goal", ""))) >= 2:
        reasons.append(f"{len(steps)} steps declared in the goal")
    if task.get("require_plan_approval"):
        reasons.append("a human must approve the plan")
    return reasons


def _target(check: dict[str, Any]) -> str:
    args = check.get("args") or {}
    return str(args.get("path") or args.get("command") or check["tool"])


def _judge_reason(mode: Mode, criteria: list[str], uncovered: list[str], settings: dict[str, Any], profile: dict[str, Mode]) -> str:
    if mode == "always":
        return _asked("judge", settings, profile)
    if not criteria:
        return "no acceptance criteria to judge"
    if not uncovered:
        return "every acceptance criterion has a deterministic check"
    return f"{len(uncovered)} of {len(criteria)} criteria have no deterministic check"


def implicit_plan(task: dict[str, Any]) -> Plan:
    """The one-step plan of a task that is not planned: it promises no tool call, so grounding, not the
    step, tracks the calls, and the criteria are checked by verify."""
    criteria = task.get("acceptance_criteria") or []
    step: Step = {"id": "s1", "description": task["goal"], "depends_on": [], "tools": [], "args": {}, "optional": False,
            "done_when": "; ".join(criteria) or "the goal is met", "evidence": None, "parallel": True, "status": "pending"}
    return {"steps": [step], "blocked": None, "attempts": 0, "errors": [], "implicit": True}


def planning_allowed(state: Mapping[str, Any]) -> bool:
    """Whether the planner may be asked at all (for a re-plan too): not when planning is `never`."""
    return ((state.get("control") or {}).get("planning") or {}).get("mode") != "never"


def judged_criteria(state: Mapping[str, Any]) -> list[str] | None:
    """The criteria the judge checks; None when the judge is not needed. A run with no recorded
    decision judges every criterion it has."""
    decision = (state.get("control") or {}).get("judge")
    if decision is None:
        criteria = state["task"].get("acceptance_criteria") or []
        return list(criteria) if criteria else None
    return list(decision["criteria"]) if decision["run"] else None


def critique_decision(state: Mapping[str, Any]) -> CritiqueDecision:
    """The critic's decision from the state after verification: its triggers, and whether it runs."""
    decision = cast(CritiqueDecision, dict(((state.get("control") or {}).get("critique")) or {"mode": "auto"}))  # state read untyped
    decision.pop("beside_judge", None)  # an earlier iteration's
    found = triggers(state)
    asked = decision["mode"] == "always"
    decision.update({"run": asked or bool(found), "triggers": found})
    if asked:
        decision["reason"] = decision.get("reason") or "asked for"
    elif found:
        decision["reason"] = "triggered: " + "; ".join(found)
    else:
        decision["reason"] = "no trigger: verification passed on its own, no failed or risky step, confidence without a critic clears the commit threshold"
    return decision


def critique_runs(state: Mapping[str, Any]) -> bool:
    """Whether verify decided the critic runs; a run with no recorded decision runs it."""
    decision = (state.get("control") or {}).get("critique")
    return decision is None or decision.get("run") is not False


def triggers(state: Mapping[str, Any]) -> list[str]:
    """Every reason the output needs the critic (empty: none)."""
    quality = state.get("quality") or {}
    verification = quality.get("verification") or {}
    found = []
    if not verification.get("passed"):
        found.append("verification failed: " + ", ".join(failure.get("criterion", "?") for failure in verification.get("failures", [])))
    if verification.get("undecided"):
        found.append(f"the {verification['undecided']} gave no verdict")
    if (consistency := verification.get("consistency")) is not None and consistency < 1:
        found.append(f"judge samples disagree (agreement {consistency})")
    if verification.get("conflicts"):
        found.append(f"{len(verification['conflicts'])} conflicting source(s)")
    found += run_triggers(state)
    if not found and (confidence := estimate(signals_of(state))) < state["settings"].get("commit_threshold", 0.8):
        found.append(f"confidence without a critic is {confidence}, below the commit threshold")
    return found


def run_triggers(state: Mapping[str, Any]) -> list[str]:
    """The triggers the run itself sets before any verdict: failed calls, side effects not verified or
    risky, a repaired output (empty: none)."""
    found = []
    acted = [obs for obs in state.get("observations", []) if obs.get("phase") != "verify"]
    if failed := sorted({obs["tool"] for obs in acted if obs.get("status") in FAILED_STATUSES}):
        found.append("tool calls failed: " + ", ".join(failed))
    if unverified := sorted({obs["tool"] for obs in acted if obs.get("side_effect") and obs.get("status") == "ok"
                             and obs.get("stage") not in ("verified", "committed")}):
        found.append("side effects not verified (a failed post-condition, or a human's answer in place of the call): " + ", ".join(unverified))
    if repairs := (state.get("quality") or {}).get("repairs"):
        found.append(f"the output was repaired {len(repairs)} time(s)")
    if risky := risky_effects(state):
        found.append("risky side effects: " + ", ".join(risky))
    return found


def beside_judge(state: Mapping[str, Any]) -> bool:
    """Whether the critic runs beside the judge, in verify's step: the step comes from the actor's final
    answer (not from a resume of verify), the judge has criteria to check, the critic runs whatever the
    verdict (asked for, or a run trigger), and each of the two can make a model call within its share
    of the budget (model_shares)."""
    control = state.get("control")
    if not control or (state.get("status") or {}).get("phase") != "act" or judged_criteria(state) is None:
        return False
    if control["critique"]["mode"] != "always" and not run_triggers(state):
        return False
    return all(check_before_model_call(state.get("usage") or {}, share) is None for share in model_shares(state))


def model_shares(state: Mapping[str, Any]) -> tuple[Budget, Budget]:
    """The judge's and the critic's budgets when they run at once: what is left for model calls, split
    in proportion to the calls each makes first (`judge_samples` for the judge, one for the critic)."""
    usage, budget = state.get("usage") or {}, Budget.model_validate(state["budget"])
    samples = state["settings"].get("judge_samples", 1)
    return model_share(usage, budget, samples, samples + 1), model_share(usage, budget, 1, samples + 1)


def critic_beside(decision: CritiqueDecision, beside: bool) -> CritiqueDecision:
    """The decision as recorded, with whether the critic ran beside the judge in this step."""
    return {**decision, "beside_judge": True} if beside else decision  # beside implies a run trigger or `always`: `run` is set


def risky_effects(state: Mapping[str, Any]) -> list[str]:
    """Side effects that ran and are irreversible, or that the policy held for a human's approval."""
    held = {record["call_id"] for record in state.get("approvals", []) if record.get("run")}
    return sorted({
        obs["tool"] + (" (irreversible)" if obs.get("reversibility") == "irreversible" else " (approved by a human)")
        for obs in state.get("observations", [])
        if obs.get("phase") != "verify" and obs.get("side_effect") and obs.get("status") == "ok"
        and (obs.get("reversibility") == "irreversible" or obs["call_id"] in held)
    })


def phase_reasons(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """For `boundloop show` and the console: whether each decided phase ran (its role's model calls) and
    why, after where the run's tool definitions came from (the servers' listing at intake, or a kept one)."""
    control = values.get("control")
    if not control:
        return []
    called = (values.get("usage") or {}).get("calls_by_role") or {}
    planning, judge, critique = control["planning"], control["judge"], control["critique"]
    revisions = (values.get("plan") or {}).get("revisions") or []
    plan_reason = planning["reason"] + ("".join(f"; re-planned ({revision['cause']})" for revision in revisions) if revisions else "")
    judge_reason = judge["reason"]
    if judge["run"] and not called.get("judge"):
        judge_reason += "; not asked: a deterministic stage failed the output first, or the run ended before verification"
    if critique.get("run") is None and critique["mode"] != "always":
        critique_reason = "not decided: the run did not reach verification"
    else:
        critique_reason = critique["reason"] + ("; it ran beside the judge, in one step" if critique.get("beside_judge") else "")
    rows = [
        {"phase": "plan", "ran": bool(called.get("planner")), "reason": plan_reason},
        {"phase": "judge", "ran": bool(called.get("judge")), "reason": judge_reason},
        {"phase": "critique", "ran": bool(called.get("critic")), "reason": critique_reason},
    ]
    if listing := control.get("listing"):  # the servers' listing at intake "ran" unless a kept one stood in for it
        rows.insert(0, {"phase": "tool listing", "ran": not listing["kept"], "reason": listing["reason"] + _live_check(listing, values)})
    return rows


def _live_check(listing: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """What the first actor step's live listing made of a kept one: `tools` keeps its `kept` mark until then."""
    if not listing["kept"]:
        return ""
    if listing.get("differed"):
        return kept_listing.REPLACED
    return kept_listing.UNCHECKED if (values.get("tools") or {}).get("kept") else kept_listing.CONFIRMED
