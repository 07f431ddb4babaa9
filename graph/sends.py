"""sends: a tool task's `Send` argument as it is stored, and as the task reads it.

An execute or approve task gets nothing but its Send's argument, also when it re-runs after a
crash (from the checkpoint), and LangGraph stores that argument twice for every call: as a write
of the routing task and in the next checkpoint's pending tasks. So `pack` keeps only what the task
reads and cannot get otherwise, and `unpack`, which the graph's task wrapper calls before the task runs
(graph/builder.py), gives the whole values back:

- settings without the values equal to RunSettings' defaults, and the budget without those equal
  to the task's profile's (a run's budget is its profile's, with the task's overrides and a
  human's extensions); both come back whole;
- of usage, the counters the task reads (`USAGE_READ`); the others come back as zeros;
- of the breakers, the model circuits: the sampler's (a tool's circuits are the gate's, in act);
- of the run's pinned tools, their version: the task's wrapper gets the pins themselves from the
  process's cache or the run's saved state (`Services.pins`), which the version proves the same;
- no entry whose value is None: every reader `.get`s those.
"""

from __future__ import annotations

from typing import Any

from graph.budget import add_usage
from graph.mcp_scope import SAMPLER
from graph.profiles import PROFILES
from graph.task import RunSettings

USAGE_READ = (
    "model_turns", "input_tokens", "output_tokens", "cost_usd", "wall_clock_s", "unpriced_model_calls", "unpriced_tool_calls",  # the sampler's budget check
    "retries",  # the sampler's retry budget (graph/models.py call_model)
    "escalations",  # the server's questions (graph/mcp_scope.py)
    "tool_calls",  # the approval request's `budget_used` (nodes/approve.py), with model_turns, cost_usd, wall_clock_s
)
"""The usage counters a tool task reads; the sampler's call index (`calls_by_role`) is kept too."""
_SETTINGS = RunSettings().model_dump(mode="json")
_BUDGETS = {profile: budget.model_dump(mode="json") for profile, budget in PROFILES.items()}
# Shared by every unpacked payload: the readers never change the settings or the budget they get.


def pack(payload: dict[str, Any]) -> dict[str, Any]:
    """The Send argument to store for a task whose whole `payload` is given."""
    usage = {name: payload["usage"][name] for name in USAGE_READ if payload["usage"].get(name)}
    if sampled := payload["usage"].get("calls_by_role", {}).get(SAMPLER):
        usage["calls_by_role"] = {SAMPLER: sampled}
    circuits = {name: circuit for name, circuit in (payload.get("breakers") or {}).get("circuits", {}).items() if name.startswith("model:")}
    packed = {
        **payload,
        "settings": _changed(payload["settings"], _SETTINGS),
        "budget": _changed(payload["budget"], _BUDGETS[payload["profile"]]),
        "usage": usage,
        "breakers": {"circuits": circuits} if circuits else None,
        "tools": payload.get("tools") and {"version": payload["tools"]["version"]},
    }
    return {key: value for key, value in packed.items() if value is not None}


def unpack(packed: dict[str, Any]) -> dict[str, Any]:
    """What the task reads: the stored argument with its settings, budget and usage whole."""
    return {
        **packed,
        "settings": {**_SETTINGS, **packed["settings"]},
        "budget": {**_BUDGETS[packed["profile"]], **packed["budget"]},
        "usage": add_usage(None, packed["usage"]),
    }


def _changed(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`values` without the entries equal to their default (same type too: 1 is not True)."""
    return {key: value for key, value in values.items()
            if key not in defaults or type(value) is not type(defaults[key]) or value != defaults[key]}

