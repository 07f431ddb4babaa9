"""The timeline reads the trace as it is and as the richer trace writes it: calls named in
`decisions`/`tool_calls` by `request_id`, and a running budget total per node event."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from boundloop.graph.console import timeline

START = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def node(node: str, at_ms: float, elapsed_ms: float, **data: object) -> dict[str, object]:
    return {"kind": "node", "node": node, "at": START + timedelta(milliseconds=at_ms), "data": {"elapsed_ms": elapsed_ms, **data}}


def test_phases_lanes_calls_and_running_budget_totals_from_a_richer_trace():
    trace = [
        node("intake", 100, 100, run={"user": "ana"}, budget_total={"time_s": 0.1}),
        node("gate", 300, 50, decisions=[{"call_id": "a0.0", "tool": "workspace__read_file", "decision": "allow"}], budget_total={"time_s": 0.3}),
        {"kind": "interrupt", "node": "approve", "at": START, "data": {"requests": []}},  # an event kind the timeline does not draw
        node("observe", 400, 100, tool_calls=[{"request_id": "a0.0", "status": "ok"}], budget_total={"time_s": 0.4, "tokens": 9}),
        node("gate", 500, 100, budget_total={"time_s": 0.5}),
    ]
    values = {"budget": {"wall_clock_s": 1.0}, "usage": {"wall_clock_s": 0.5},
              "observations": [{"call_id": "a0.0", "tool": "workspace__read_file", "status": "ok"}]}

    drawn = timeline.build(trace, values, approvals=[])

    assert drawn.lanes == ["intake", "gate", "observe"]
    assert [(phase.node, phase.lane, phase.start_ms, phase.end_ms) for phase in drawn.phases] == [
        ("intake", 0, 0.0, 100.0), ("gate", 1, 250.0, 300.0), ("observe", 2, 300.0, 400.0), ("gate", 1, 400.0, 500.0)]
    assert drawn.phases[1].detail == "workspace__read_file:allow"
    [call] = drawn.calls
    assert (call["decision"], call["status"], call["x"]) == ("admitted", "ok", timeline.WIDTH * 300 / 500)
    clock = next(d for d in drawn.dimensions if d.name == "wall_clock_s")
    assert (clock.used, clock.fraction) == (0.5, 0.5)
    assert [fraction for _, fraction in clock.points] == [0.1, 0.3, 0.4, 0.5]
