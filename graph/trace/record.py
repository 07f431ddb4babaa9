"""trace: write what each step did to the run's trace (the record that explains the run), and keep the run
registry current.

Each node writes its events in one statement when it settles (a tool task — one call sent by a
guard — writes a `call` event; the phases write `node` events): the node event (step, the verified
checkpoint it started from, the budget vector it spent and the run's total after it, the tool
decisions or calls it made, validation results, re-plans with their cause, escalations, the terminal code) plus, at intake,
the run header: user scope, goal, autonomy-boundary version, workflow-graph version, model and
prompt versions per role, tool registry version. An interrupt writes an `interrupt` event with the
request. The trace is append-only, and read-only once the run closed (checkpoints/schema.py);
`boundloop.graph.trace.fields` says what a run's trace lacks, `boundloop.graph.trace.replay` validates its trajectory.
Events are redacted before they are written (tools/secrets.py). A step's events are written by the
saver in the transaction that saves the step (checkpoints/pending_trace.py): a step killed before
its save leaves no event, and its re-run writes them once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime

from boundloop.checkpoints import store
from boundloop.checkpoints.pending_trace import TaskKey
from boundloop.graph.trace import langsmith as langsmith_trace
from boundloop.graph.models import prompts
from boundloop.graph.core import escalations
from boundloop.graph.core.budget import add_usage
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal
from boundloop.tools import authority, secrets
from boundloop.tools.ledger import idempotency_key

ROLES = ("planner", "actor", "judge", "critic", "goal_check")
PROMPTS = {"planner": prompts.PLANNER, "actor": prompts.ACTOR + prompts.MEMORY_RULE + prompts.SCHEMA_RULE, "judge": prompts.JUDGE, "critic": prompts.CRITIC,
           "goal_check": prompts.GOAL_CHECK}
BUDGET_KEYS = ("tokens", "cost_usd", "calls", "retries", "time_s", "context_tokens", "memory_writes")
"""The budget vector a trace step records: tokens, cost, calls, retries, time, context, memory writes."""
REOPENABLE = frozenset({Terminal.UNAVAILABLE_DEP.value})
"""Terminal codes a run can be continued from (runner._reopening): its trace stays open (runner closes the others)."""
ESCALATING_NODES = ("approve", "escalate")


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def graph_version(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> str:
    """A hash of the compiled graph's nodes and edges (conditional edges marked as such)."""
    drawn = compiled.get_graph()
    return digest({"nodes": sorted(drawn.nodes), "edges": sorted([e.source, e.target, bool(e.conditional)] for e in drawn.edges)})


def prompt_versions() -> dict[str, str]:
    return {role: hashlib.sha256(text.encode()).hexdigest()[:16] for role, text in PROMPTS.items()} | {"label": prompts.PROMPT_VERSION}


def budget_vector(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    return {
        "tokens": usage.get("input_tokens", 0) + usage.get("output_tokens", 0),
        "cost_usd": usage.get("cost_usd", 0),
        "calls": usage.get("model_turns", 0) + usage.get("tool_calls", 0),
        "retries": usage.get("retries", 0),
        "time_s": usage.get("wall_clock_s", 0),
        "context_tokens": usage.get("context_tokens", 0),
        "memory_writes": usage.get("memory_writes", 0),
    }


def step_position() -> tuple[int | None, str | None]:
    """The superstep this node runs in, and the checkpoint (the last verified transition) it started from."""
    config = get_config()
    return config.get("metadata", {}).get("langgraph_step"), (config["configurable"].get("checkpoint_map") or {}).get("")


async def record_node(services: Services, run_id: str, node: str, state: Mapping[str, Any], update: Mapping[str, Any], elapsed_s: float) -> None:
    """Write the node's events with its step; register the run at intake and record its ending at finalize."""
    events = node_events(services, node, state, update, elapsed_s)
    await _append(services, run_id, [(kind, node, data) for kind, data in events])
    task = update.get("task") or state.get("task") or {}
    if node == "intake":
        await store.upsert_run(await services.pool(), thread_id=run_id, goal=str(task.get("goal", "")), profile=str(task.get("profile", "")),
                               status="running", task_hash=(update.get("boundary") or {}).get("task_hash", ""))
    elif node == "finalize":
        await store.upsert_run(await services.pool(), thread_id=run_id, goal=str(task.get("goal", "")), profile=str(task.get("profile", "")),
                               status=str(update["status"]["terminal"]), task_hash=(state.get("boundary") or {}).get("task_hash", ""),
                               result=secrets.redact(update["result"] if "result" in update else state.get("result")))


async def record_interrupt(services: Services, run_id: str, node: str, requests: list[Any]) -> None:
    """A node stopped to ask a human: the requests it made."""
    step, checkpoint = step_position()
    data = {"step": step, "checkpoint_id": checkpoint, "requests": [getattr(item, "value", item) for item in requests]}
    langsmith_trace.event("interrupt", secrets.redact(data))
    await _append(services, run_id, [("interrupt", node, data)])
    # Whoever drives the run (a Runner, the LangGraph server), the registry says it waits, and for what.
    await store.set_run_status(await services.pool(), run_id, store.WAITING,
                               result={"waiting_for": escalations.waiting_for(secrets.redact(data["requests"]))})


async def _append(services: Services, run_id: str, events: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Redact the node's events and hand them to the saver that saves this step, which writes them
    in the same transaction; write them now only when no such saver runs the graph (no
    checkpointer, or another one)."""
    redacted: list[tuple[str, str | None, Any]] = [(kind, node, secrets.redact(data)) for kind, node, data in events]
    hold = getattr(get_config()["configurable"].get(CONFIG_KEY_CHECKPOINTER), "hold_trace", None)  # the server's adapter forwards it
    info = get_runtime().execution_info
    if hold is not None and info is not None and info.thread_id is not None:
        hold(TaskKey.of_task(info.thread_id, info.checkpoint_ns, info.checkpoint_id, info.task_id),
             [(run_id, kind, node, data) for kind, node, data in redacted])
        return
    await store.append_events(await services.pool(), run_id, redacted)


def node_events(services: Services, node: str, state: Mapping[str, Any], update: Mapping[str, Any], elapsed_s: float) -> list[tuple[str, dict[str, Any]]]:
    step, checkpoint = step_position()
    event: dict[str, Any] = {"step": step, "checkpoint_id": checkpoint, "elapsed_ms": round(elapsed_s * 1000, 3),
                             "budget": budget_vector(update.get("usage"))}
    if "usage" in state:
        event["budget_total"] = budget_vector(add_usage(state.get("usage"), update.get("usage")))
    if ending := update.get("ending"):
        event["ending"] = {key: str(value) for key, value in ending.items()}
    if measured := update.get("context"):  # the context measure of the node's model call (graph/models/size.py)
        event["context"] = {key: measured[key] for key in ("role", "tokens", "growth", "method", "limit", "pressure", "compactions") if key in measured}
    if checked := update.get("goal_check"):  # the periodic goal check, passing or not (graph/quality/goal_check.py)
        event["goal_check"] = checked
    if control := update.get("control"):  # why the run enters or skips the planner, the judge, the critic (graph/quality/proportion.py)
        event["control"] = control
    if decisions := _decisions(update):
        event["decisions"] = decisions
    if calls := _tool_calls(update):
        event["tool_calls"] = calls
    if validation := _validation(node, update):
        event["validation"] = validation
    if replan := _replan(node, state, update):
        event["replan"] = replan
    if escalation := _escalation(node, state, update):
        event["escalation"] = escalation
        langsmith_trace.event(escalation["type"], secrets.redact(escalation))
    if node == "intake":
        event["run"] = _header(services, state, update)
    if node == "finalize":
        event["terminal"] = {"code": str(update["status"]["terminal"]), "reason": str((update.get("ending") or {}).get("reason", ""))}
    return [("node", event), *_authority(node, state, update)]


def _authority(node: str, state: Mapping[str, Any], update: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The task's authority as intake read it (each target with its source), again when the first plan
    made after the taint holds it to the plan targets then in force (`before_taint`), and the call that
    tainted the run with the authority then in force, the accepted plan's targets included (tools/authority.py)."""
    boundary = update.get("boundary") or {}
    if node == "intake" and "authority" in boundary:
        return [("authority", boundary["authority"])]
    held = boundary.get("authority") or {}
    if "before_taint" in held and "before_taint" not in ((state.get("boundary") or {}).get("authority") or {}):
        return [("authority", held)]
    if (taint := boundary.get("taint")) and not (state.get("boundary") or {}).get("taint"):
        return [("taint", {"taint": taint, "authority": authority.in_force(boundary, (state.get("plan") or {}).get("steps", []))})]
    return []


def _header(services: Services, state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    settings, boundary = update.get("settings") or {}, update.get("boundary") or {}
    model = boundary.get("model") or settings.get("model")
    return {
        "user": settings.get("user"),
        "goal": update.get("task") or state.get("task"),
        "autonomy_boundary_version": digest(boundary) if boundary else None,
        "policy_hash": boundary.get("policy_hash"),
        "allowed": {key: boundary.get(key) for key in ("profile", "tools", "unattended")} | _hosted_offers(boundary),
        "workflow_graph_version": services.graph_version,
        "model_versions": {role: model for role in ROLES},
        "prompt_template_versions": prompt_versions(),
        "tool_registry_version": (update.get("tools") or {}).get("version"),
        "budget_limits": update.get("budget"),
    }


def _hosted_offers(boundary: dict[str, Any]) -> dict[str, Any]:
    """The provider-hosted tools offered, or not, and why (graph/calls/hosted.py): their permission decision."""
    offers = [{key: entry.get(key) for key in ("name", "type", "offered", "decision", "rule", "tools")} for entry in boundary.get("hosted") or []]
    return {"hosted": offers} if offers else {}


def _decisions(update: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The permission decision on each call proposed in this step: the gate's in act's step (allow,
    ask, or the refusal; act also reports calls a provider already ran, which were not decided
    here), and verify's on the task's checks, which the same gateway admitted in verify's own step
    (a refused check never runs and leaves no observation, so each one there was allowed), and the
    built-in payload read's, which act decides and runs in its own step (allowed, or refused by the budget)."""
    checks = [_decision(obs, "allow") for obs in update.get("observations", []) if obs.get("phase") == "verify"]
    checks += [_decision(obs, "allow" if obs["stage"] == "observed" else obs["status"]) for obs in update.get("observations", []) if obs.get("builtin")]
    if "dispatch" not in update:
        return checks
    allowed = {call["call_id"]: call for wave in update.get("dispatch") or [] for call in wave}
    decided = []
    for obs in update.get("observations", []):
        if obs.get("hosted") and obs.get("stage") in ("observed", "attempted") or obs.get("phase") == "verify" or obs.get("grounded"):
            continue  # ran already (a provider's call, a check) or grounded here: decided in an earlier step
        call = allowed.get(obs["call_id"])
        decided.append(_decision(obs, obs.get("decision") or obs.get("status") if call is None else ("ask" if call.get("ask") else "allow")))
    return decided + checks


def _decision(obs: dict[str, Any], decision: str) -> dict[str, Any]:
    return {"call_id": obs["call_id"], "tool": obs.get("tool"), "server": obs.get("server"), "args_hash": obs.get("args_hash"),
            "side_effect": obs.get("side_effect"), "rule": obs.get("rule"), "decision": decision}


def _tool_calls(update: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Calls that ran (or were answered in their place): name, argument hash, request id, status, pointer."""
    return [
        {"name": obs.get("tool"), "server": obs.get("server"), "args_hash": obs.get("args_hash"), "request_id": obs["call_id"],
         "status": obs.get("status"), "observation_pointer": obs.get("pointer") or f"observation:{obs['call_id']}",
         "sha256": obs.get("sha256"), "side_effect": obs.get("side_effect"), "stage": obs.get("stage"), "ledger_key": obs.get("ledger_key")}
        | ({"hosted": True} if obs.get("hosted") else {})
        for obs in update.get("observations", [])
        if obs.get("stage") in ("observed", "attempted")
    ]


def _validation(node: str, update: Mapping[str, Any]) -> dict[str, Any] | None:
    quality, plan = update.get("quality") or {}, update.get("plan") or {}
    if node == "validate_plan" and plan:
        return {"check": "plan_schema", "passed": bool(plan.get("valid")), "errors": plan.get("errors", [])}
    if node == "verify" and (verification := quality.get("verification")):
        return {"check": "acceptance", "passed": verification.get("passed"), "failures": verification.get("failures", []),
                "conflicts": verification.get("conflicts", [])}
    if node == "critique" and "pending" in (quality.get("critique") or {}):  # beside the judge: weigh scores it
        return {"check": "critique", "passed": None, "settled_by": "weigh"}
    if node in ("critique", "weigh") and (critique := quality.get("critique")):
        passed = None if critique.get("unusable") else not critique.get("below_minimum")  # None: the critic gave no score
        return {"check": "critique", "passed": passed, "weighted": critique.get("weighted"),
                "quality_score": (quality.get("scores") or [{}])[-1].get("score")}
    if node == "repair" and (update.get("usage") or {}).get("repairs") and quality.get("repairs"):
        last = quality["repairs"][-1]
        return {"check": "repair", "strategy": last["strategy"], "quality_score": last.get("score"),
                "diagnosis": [{key: defect.get(key) for key in ("cause", "source", "location", "step", "strategy")} for defect in last["diagnosis"]]}
    return None


def _replan(node: str, state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any] | None:
    """The re-plan a plan node made (graph/quality/replan.py): its cause, what it replaced and kept."""
    before, after = (state.get("plan") or {}).get("revisions", []), (update.get("plan") or {}).get("revisions", [])
    return after[-1] if node == "plan" and len(after) > len(before) else None


def _escalation(node: str, state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any] | None:
    if node == "approve":
        record: dict[str, Any] = next(iter(update.get("approvals") or []), {})
        return {"type": "tool_approval", "call_id": record.get("call_id"), "decision": record.get("decision"), "approver": record.get("approver")}
    if node == "escalate":
        kind, request = escalations.request(state)
        return {"type": kind, "request": request, "resume_to": (update.get("status") or {}).get("resume_to"),
                "decision": "continue" if (update.get("status") or {}).get("resume_to") else "stop"}
    return None


async def record_task(services: Services, run_id: str, node: str, payload: dict[str, Any], update: Mapping[str, Any], elapsed_s: float) -> list[dict[str, Any]]:
    """A tool task (one call, sent by a guard): its event, with the call's ledger key when it has side
    effects. Returns the event's tool call records."""
    call = payload.get("call") or {}
    observations = [
        {**obs, "ledger_key": idempotency_key(run_id, call.get("step_id"), call["call_id"], call["args_hash"]) if call.get("side_effect") else None}
        for obs in update.get("observations", [])
    ]
    events = [("call", data) for _, data in node_events(services, node, {}, {**update, "observations": observations}, elapsed_s)]
    events[0][1]["call"] = {"call_id": call.get("call_id"), "tool": call.get("name"), "server": call.get("server"), "args_hash": call.get("args_hash"),
                            "side_effect": call.get("side_effect"), "rule": call.get("rule")}
    await _append(services, run_id, [(kind, node, data) for kind, data in events])
    return events[0][1].get("tool_calls", [])
