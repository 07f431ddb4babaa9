"""trace_check: which of the run trace's required fields a run's trace lacks.

Read from the trace alone (checkpoints/store.py), so it judges what an auditor would have. A run
still waiting or driven has no terminal code yet, and is reported as lacking it.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import store
from boundloop.graph.trace.replay import STEP_KINDS
from boundloop.graph.trace.record import BUDGET_KEYS

HEADER_FIELDS = ("user", "goal", "autonomy_boundary_version", "workflow_graph_version", "model_versions",
                 "prompt_template_versions", "tool_registry_version")
"""The run header intake writes; `user` is the tenant/user scope (a run without --user is `default`'s):
a null or empty one is missing, since nobody can say whom the run acted for."""
TOOL_CALL_FIELDS = ("name", "args_hash", "request_id", "status", "observation_pointer")


async def missing_trace_fields(pool: AsyncConnectionPool, run_id: str) -> list[str]:
    """The trace fields `run_id` lacks, e.g. `terminal_code` or `tool_calls[a1.0].args_hash`; empty when complete."""
    events = await store.read_trace(pool, run_id)
    return missing_fields([{"kind": e.kind, "node": e.node, "data": e.data} for e in events])


def _scope(user: Any) -> bool:
    """Whether the recorded tenant/user scope names someone: null, empty or blank does not."""
    return isinstance(user, str) and bool(user.strip())


def missing_fields(events: list[dict[str, Any]]) -> list[str]:
    if not events:
        return ["run_id"]
    nodes = [event for event in events if event["kind"] in STEP_KINDS]
    missing: list[str] = []
    intake = next((event["data"] for event in nodes if event["node"] == "intake" and event["data"].get("run")), None)
    header = (intake or {}).get("run") or {}
    refused = bool((intake or {}).get("ending"))  # a task refused at intake was never granted a boundary or tools
    missing += [
        "tenant_id/user_scope" if name == "user" else name
        for name in HEADER_FIELDS
        if name not in header or (name == "user" and not _scope(header["user"])) or (not refused and not header[name])
    ]
    for event in nodes:
        data, where = event["data"], f"{event['node']}@{event['data'].get('step')}"
        if data.get("step") is None or "checkpoint_id" not in data or (data["step"] > 1 and not data["checkpoint_id"]):
            missing.append(f"state_checkpoints[{where}]")
        if set(BUDGET_KEYS) - set(data.get("budget") or {}):
            missing.append(f"budget_vector[{where}]")
        for call in data.get("tool_calls", []):
            missing += [f"tool_calls[{call.get('request_id')}].{name}" for name in TOOL_CALL_FIELDS if not call.get(name)]
        if event["node"] in ("validate_plan", "verify", "critique", "weigh") and "validation" not in data:
            missing.append(f"validation_results[{where}]")
        if event["node"] in ("approve", "escalate") and not (data.get("escalation") or {}).get("decision"):
            missing.append(f"escalation_events[{where}]")
    asked = sum(1 for event in events if event["kind"] == "interrupt")
    answered = sum(1 for event in nodes if event["node"] in ("approve", "escalate"))
    if asked and not answered:
        missing.append("escalation_events[decision]")
    if not any(event["node"] == "finalize" and (event["data"].get("terminal") or {}).get("code") for event in nodes):
        missing.append("terminal_code")
    return missing
