"""timeline: one run's trace laid out on a time axis, as plain numbers a template draws in SVG.

Phases come from the trace's node events (each ends at `at` and lasted `elapsed_ms`), tool calls
from the checkpointed observations and approval records, escalations from the approval requests.
Budget consumption is drawn per dimension: the run's usage against each limit, and its course over
the run where node events carry a running total (`budget_total`, the budget vector: tokens, cost, calls, retries, time).
Why the planner, the judge and the critic ran or were skipped comes from the run's recorded decision.
Calls are placed where the trace first names them (`calls`, `decisions` or `tool_calls`). Unknown
event kinds and extra fields are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from boundloop.graph.core.budget import Budget
from boundloop.graph.core.budget import used_of
from boundloop.graph.quality import proportion

WIDTH = 900
"""Width of the drawing area, in SVG units."""
RUNNING_TOTALS = {"cost_usd": "cost_usd", "wall_clock_s": "time_s", "retries": "retries"}
"""Budget dimension → its name in a node event's `budget_total` vector."""
CALL_LISTS = ("calls", "decisions", "tool_calls")
"""Lists of calls a node event may carry, each call named by `call_id` or `request_id`."""


@dataclass
class Phase:
    node: str
    start_ms: float
    end_ms: float
    x: float = 0.0
    width: float = 0.0
    detail: str = ""
    lane: int = 0
    """Row of the drawing: one per node, in the order the nodes first ran."""


@dataclass
class Dimension:
    name: str
    used: float
    limit: float | None
    points: list[tuple[float, float]] = field(default_factory=list)
    """(x, fraction of the limit) per step that recorded it."""

    @property
    def fraction(self) -> float:
        return min(1.0, self.used / self.limit) if self.limit else 0.0


@dataclass
class Timeline:
    span_ms: float
    phases: list[Phase]
    lanes: list[str]
    dimensions: list[Dimension]
    calls: list[dict[str, Any]]
    escalations: list[dict[str, Any]]
    reasons: list[dict[str, Any]] = field(default_factory=list)
    """Whether the planner, the judge and the critic ran, and why (graph/quality/proportion.py)."""
    width: int = WIDTH


def build(trace: list[dict[str, Any]], values: dict[str, Any], approvals: list[dict[str, Any]]) -> Timeline:
    """The timeline of a run from its trace events, its checkpointed values and its approval records."""
    nodes = [event for event in trace if event.get("kind") == "node" and isinstance(event.get("at"), datetime)]
    origin = min((_start(event) for event in nodes), default=None)
    phases = [Phase(str(event.get("node")), _ms(_start(event), origin), _ms(event["at"], origin), detail=_detail(event)) for event in nodes]
    span = max((phase.end_ms for phase in phases), default=0.0) or 1.0
    lanes = list(dict.fromkeys(phase.node for phase in phases))
    for phase in phases:
        phase.lane = lanes.index(phase.node)
        phase.x = WIDTH * phase.start_ms / span
        phase.width = max(1.0, WIDTH * (phase.end_ms - phase.start_ms) / span)
    called_at: dict[Any, float] = {}
    for event in nodes:
        for key in CALL_LISTS:
            for call in (event.get("data") or {}).get(key) or []:
                if isinstance(call, dict):
                    called_at.setdefault(call.get("call_id") or call.get("request_id"), _ms(event["at"], origin))
    escalations = _escalations(approvals)
    end = max((event["at"] for event in nodes), default=None)
    for escalation in escalations:  # the wait for a human, as a band from request to decision (or to the last event)
        until = escalation["decided"] or end
        if origin is not None and isinstance(escalation["asked"], datetime) and until is not None:
            escalation["x"] = max(0.0, WIDTH * _ms(escalation["asked"], origin) / span)
            escalation["width"] = max(1.0, min(WIDTH, WIDTH * _ms(until, origin) / span) - escalation["x"])
    return Timeline(span, phases, lanes, _dimensions(nodes, values, origin, span), _calls(values, called_at, span, approvals), escalations,
                    proportion.phase_reasons(values))


def _dimensions(nodes: list[dict[str, Any]], values: dict[str, Any], origin: datetime | None, span: float) -> list[Dimension]:
    if not values.get("budget"):
        return []
    budget = Budget.model_validate(values["budget"])
    usage = values.get("usage") or {}
    dimensions = []
    for name in Budget.model_fields:
        if name == "parallel_calls":
            continue
        limit = getattr(budget, name)
        dimension = Dimension(name, used_of(usage, name), limit)
        for event in nodes:
            total = (event.get("data") or {}).get("budget_total")
            if limit and name in RUNNING_TOTALS and isinstance(total, dict) and isinstance(total.get(RUNNING_TOTALS[name]), (int, float)):
                dimension.points.append((WIDTH * _ms(event["at"], origin) / span, min(1.0, total[RUNNING_TOTALS[name]] / limit)))
        dimensions.append(dimension)
    return dimensions


def _calls(values: dict[str, Any], called_at: dict[Any, float], span: float, approvals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    decisions = {record.get("call_id"): record for record in values.get("approvals") or []}
    asked = {row["call_id"] for row in approvals if row.get("decision") is None}
    calls = []
    for obs in values.get("observations") or []:
        decided = decisions.get(obs.get("call_id")) or {}
        at = called_at.get(obs.get("call_id"))
        calls.append({
            "call_id": obs.get("call_id"), "tool": obs.get("tool") or obs.get("name"), "status": obs.get("status") or obs.get("stage"),
            "rule": obs.get("rule"), "decision": decided.get("decision") or _undecided(obs, asked),
            "approver": decided.get("approver"), "x": None if at is None else WIDTH * at / span,
        })
    return calls


def _undecided(obs: dict[str, Any], asked: set[str]) -> str:
    """What was decided about a call no human decided: it waits for one, policy denied it, or admitted it."""
    if obs.get("call_id") in asked:
        return "waiting"
    return "denied" if obs.get("status") == "denied" else "admitted"


def _escalations(approvals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for row in approvals:
        payload = row.get("payload") or {}
        rows.append({"call_id": row["call_id"], "type": payload.get("type", row.get("tool")), "what": payload.get("name") or payload.get("question")
                     or payload.get("reason") or row.get("tool"), "decision": row.get("decision") or "pending",
                     "approver": row.get("approver"), "asked": row.get("created_at"), "decided": row.get("decided_at"),
                     "x": None, "width": 0.0})
    return rows


def _start(event: dict[str, Any]) -> datetime:
    return event["at"] - timedelta(milliseconds=float((event.get("data") or {}).get("elapsed_ms") or 0))


def _ms(at: datetime, origin: datetime | None) -> float:
    return 0.0 if origin is None else (at - origin).total_seconds() * 1000


def _detail(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    if code := (data.get("ending") or {}).get("code"):
        return str(code)
    calls = [call for call in data.get("calls") or data.get("decisions") or [] if isinstance(call, dict)]
    return ", ".join(f"{call.get('tool')}:{call.get('status') or call.get('decision')}" for call in calls)
