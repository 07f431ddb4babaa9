"""budget: the budget vector, what a run has used of it, and every check against it.

All budget arithmetic lives here. Limits (`Budget`) and usage (`Usage`) share field names so a
check reads `usage.x >= budget.x`. Checks are named for the moment they run and always run
*before* the spend they guard; usage is settled afterwards from what was actually spent.
Usage travels through graph state as a plain dict of deltas summed by `add_usage`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from boundloop.graph.core.status import Terminal
from boundloop.graph.core.records import Usage


class Budget(BaseModel):
    """Hard limits for one run. `None` means no limit on that dimension."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    model_turns: int | None = 30
    """Model calls of every role (planner, actor, judge, critic) together."""
    tool_calls: int | None = 40
    """Tool calls dispatched, all servers together."""
    tool_calls_per_tool: int | None = None
    """Tool calls dispatched to any single tool."""
    tool_calls_per_server: int | None = None
    """Tool calls dispatched to any single MCP server."""
    side_effects: int | None = None
    """Calls to tools that are not read-only."""
    input_tokens: int | None = 200_000
    """Prompt tokens, from the model's usage metadata (estimated when the provider sends none)."""
    output_tokens: int | None = 30_000
    """Completion tokens, from the model's usage metadata (estimated when the provider sends none)."""
    cost_usd: float | None = None
    """Spend ceiling in US dollars, from the price table. A model without a price stops the run."""
    wall_clock_s: float | None = 300.0
    """Seconds of active run time (time spent waiting for a human is not counted)."""
    repairs: int | None = 2
    """Repair passes after a failed verification or critique (the reflection budget)."""
    replans: int | None = 2
    """Re-plans after the first plan: for a plan that failed validation, or a step whose calls kept
    failing (graph/quality/replan.py; each replaces only the affected steps)."""
    tool_result_chars: int | None = 200_000
    """Characters of tool output shown to the model, all calls together."""
    retries: int | None = 3
    """Automatic retries of failed safe (read-only or idempotent) tool calls and of failed model
    requests, all calls together."""
    parallel_calls: int = 4
    """Read-only calls dispatched at once."""
    escalations: int | None = 5
    """Times a run may stop to ask a human (a question, a budget extension, a review)."""
    memory_writes: int | None = 5
    """Persistent memories the write gate may promote after the run commits (graph/context/memory.py)."""
    context_tokens: int | None = None
    """Tokens one model request may carry, measured before it is sent (graph/models/size.py). The
    context pressure gate compacts the actor's context at `context_threshold` of the smaller of this
    and the model's context window, and halts the run when compaction cannot bring it under."""


USAGE_COUNTERS = (
    "model_turns",
    "tool_calls",
    "side_effects",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "wall_clock_s",
    "repairs",
    "replans",
    "tool_result_chars",
    "retries",
    "unpriced_model_calls",
    "unpriced_tool_calls",
    "escalations",
    "estimated_usage_calls",
    "memory_writes",
    "context_tokens_total",
    "compactions",
    "recovered_model_calls",
)
USAGE_PEAKS = ("context_tokens",)
"""Dimensions measured per call: the total keeps the largest, not the sum."""
USAGE_MAPS = ("per_tool", "per_server", "calls_by_role", "input_tokens_by_role", "output_tokens_by_role", "cost_usd_by_role", "fallbacks_by_role")


def empty_usage() -> Usage:
    return cast(Usage, _zero_usage())  # every key of Usage, each zero or empty


def _zero_usage() -> dict[str, Any]:
    usage: dict[str, Any] = {name: 0 for name in USAGE_COUNTERS}
    usage.update({name: {} for name in USAGE_MAPS})
    usage.update({name: 0 for name in USAGE_PEAKS})
    return usage


def add_usage(current: Mapping[str, Any] | None, delta: Mapping[str, Any] | None) -> Usage:
    """Reducer: sum a usage delta into the running total (parallel tasks each send a delta)."""
    return summed_usage(current, [delta])


def summed_usage(current: Mapping[str, Any] | None, deltas: list[Mapping[str, Any] | None]) -> Usage:
    """`add_usage` of each delta in turn, into one new total (a resume replays thousands)."""
    total = _zero_usage()
    _add_into(total, current)
    for delta in deltas:
        _add_into(total, delta)
        total["cost_usd"] = round(total["cost_usd"], 10)
        total["wall_clock_s"] = round(total["wall_clock_s"], 6)
    return cast(Usage, total)  # every key of Usage, summed


def _add_into(total: dict[str, Any], source: Mapping[str, Any] | None) -> None:
    for key, value in (source or {}).items():
        if key in USAGE_MAPS:
            merged = total[key]
            for name, count in value.items():
                merged[name] = merged.get(name, 0) + count
        elif key in USAGE_PEAKS:
            total[key] = max(total.get(key, 0), value)
        else:
            total[key] = total.get(key, 0) + value


def sparse(usage: Mapping[str, Any]) -> Usage:
    """A usage delta without its zero counters and empty maps: what a node writes (`add_usage`
    fills the rest back in), so a step's checkpoint write carries only what it spent."""
    return cast(Usage, {key: value for key, value in usage.items() if value})  # a subset of a usage's keys


@dataclass(frozen=True)
class Exhaustion:
    """A budget dimension that stops the run, with the message a person reads."""

    dimension: str
    used: float
    limit: float
    code: Terminal
    unpriced: bool = False
    """A cost limit stopped the run because a call's price is unknown, not because it was spent."""
    model: str = "MODEL"
    """The model whose price is unknown, when known (named in the hint)."""
    wanted: float = 0
    """What the refused call would have brought `used` to: a model call is refused on its measured
    request before it is sent, which can ask for more than the limit's headroom suggests."""

    @property
    def message(self) -> str:
        if self.unpriced:
            return f"budget.cost_usd cannot be kept: a call has no known price ({_fmt(self.used)} of {_fmt(self.limit)} counted)."
        return f"budget.{self.dimension} exhausted: {_fmt(self.used)} of {_fmt(self.limit)} used."

    @property
    def next_safe_action(self) -> str:
        if self.unpriced:
            return UNPRICED_HINT.format(model=json.dumps(self.model))
        return (
            f"Keep the partial result, or run again with a larger budget "
            f"(--budget {self.dimension}={_suggest(self.dimension, max(self.limit, self.wanted))})."
        )


UNPRICED_HINT = (
    "Give the model its price in the --config file (\"prices\": {{{model}: [INPUT, OUTPUT]}}, USD per million tokens; "
    "a hosted tool's in \"tool_prices\"), or run again without a cost limit (--budget cost_usd=none)."
)


def _fmt(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _suggest(dimension: str, limit: float) -> str:
    """A limit half again as large, written so that it reads back larger than `limit`."""
    if dimension not in {"cost_usd", "wall_clock_s"}:
        return str(int(limit * 1.5) + 1)
    bigger = float(f"{limit * 1.5:.2g}") if limit else 1.0
    return _fmt(bigger if bigger > limit else limit * 2)


def _over(usage: Mapping[str, Any], budget: Budget, dimension: str) -> Exhaustion | None:
    limit = getattr(budget, dimension)
    used = usage.get(dimension, 0)
    if limit is not None and used >= limit:
        code = Terminal.TIMEOUT if dimension == "wall_clock_s" else Terminal.BUDGET_EXHAUSTED
        return Exhaustion(dimension, used, limit, code)
    return None


def check_before_model_call(usage: Mapping[str, Any], budget: Budget) -> Exhaustion | None:
    """Would one more model call break a limit? Runs before every planner/actor/judge/critic call."""
    if budget.cost_usd is not None and usage.get("unpriced_model_calls", 0) + usage.get("unpriced_tool_calls", 0) > 0:
        return Exhaustion("cost_usd", usage.get("cost_usd", 0), budget.cost_usd, Terminal.BUDGET_EXHAUSTED, unpriced=True)
    for dimension in ("wall_clock_s", "model_turns", "input_tokens", "output_tokens", "cost_usd"):
        if exhaustion := _over(usage, budget, dimension):
            return exhaustion
    return None


def check_before_step(usage: Mapping[str, Any], budget: Budget) -> Exhaustion | None:
    """The guard every edge passes: only the dimensions that make any further work pointless."""
    return _over(usage, budget, "wall_clock_s")


def check_before_tool_call(
    usage: Mapping[str, Any], budget: Budget, *, tool: str, server: str | None, has_side_effect: bool | None
) -> Exhaustion | None:
    """Would dispatching this call break a limit? `usage` already includes calls reserved this turn."""
    per_tool = usage.get("per_tool", {}).get(tool, 0)
    per_server = usage.get("per_server", {}).get(server, 0)
    candidates: list[tuple[str, float, int | None]] = [
        ("tool_calls", usage.get("tool_calls", 0), budget.tool_calls),
        ("tool_calls_per_tool", per_tool, budget.tool_calls_per_tool),
        ("tool_calls_per_server", per_server, budget.tool_calls_per_server),
        ("tool_result_chars", usage.get("tool_result_chars", 0), budget.tool_result_chars),
    ]
    if has_side_effect:
        candidates.append(("side_effects", usage.get("side_effects", 0), budget.side_effects))
    for dimension, used, limit in candidates:
        if limit is not None and used >= limit:
            return Exhaustion(dimension, used, limit, Terminal.BUDGET_EXHAUSTED)
    return None


def tool_call_reservation(*, tool: str, server: str, has_side_effect: bool) -> dict[str, Any]:
    """The usage delta one dispatched call reserves (settled later with the result's size)."""
    return {
        "tool_calls": 1,
        "side_effects": 1 if has_side_effect else 0,
        "per_tool": {tool: 1},
        "per_server": {server: 1},
    }


def model_call_usage(
    *, role: str, input_tokens: int, output_tokens: int, cost_usd: float | None
) -> dict[str, Any]:
    """The usage delta of one model call; an unknown price is counted, never taken as zero."""
    return {
        "model_turns": 1,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd or 0.0,
        "unpriced_model_calls": 0 if cost_usd is not None else 1,
        "calls_by_role": {role: 1},
        "input_tokens_by_role": {role: input_tokens},
        "output_tokens_by_role": {role: output_tokens},
        "cost_usd_by_role": {role: cost_usd or 0.0},
    }


def remaining(usage: Mapping[str, Any], budget: Budget) -> dict[str, float | None]:
    """Per dimension, what is left (None: unlimited)."""
    left: dict[str, float | None] = {}
    for dimension in Budget.model_fields:
        limit = getattr(budget, dimension)
        if dimension in ("parallel_calls", "escalations"):
            continue
        left[dimension] = None if limit is None else max(limit - usage.get(dimension, 0), 0)
    return left


def used_of(usage: Mapping[str, Any], dimension: str) -> float:
    """Usage of a budget dimension; per-tool and per-server limits report the busiest one."""
    maps = {"tool_calls_per_tool": "per_tool", "tool_calls_per_server": "per_server"}
    if dimension in maps:
        return max(usage.get(maps[dimension], {}).values(), default=0)
    return usage.get(dimension, 0)


def reserve_model_call(
    usage: Mapping[str, Any], budget: Budget, *, input_tokens: int, price: tuple[float, float] | None
) -> tuple[int | None, Exhaustion | None]:
    """Reserve one model call against the token and cost caps before it is sent.

    `input_tokens` is the request's measure. Returns (the reply's max_tokens, None), where max_tokens
    is what the output-token cap and the cost left after the input buy (None: no limit), or
    (None, the exhaustion) when the input alone would pass a cap or no output token is left, so
    the call is not made: a cap holds, not only before the call but after it too."""
    used_in, used_out, spent = usage.get("input_tokens", 0), usage.get("output_tokens", 0), usage.get("cost_usd", 0.0)
    if budget.input_tokens is not None and used_in + input_tokens > budget.input_tokens:
        return None, Exhaustion("input_tokens", used_in, budget.input_tokens, Terminal.BUDGET_EXHAUSTED, wanted=used_in + input_tokens)
    limits: list[int] = []
    input_cost = output_price = 0.0
    if budget.output_tokens is not None:
        limits.append(budget.output_tokens - used_out)
    if budget.cost_usd is not None and price is not None:
        input_cost, output_price = input_tokens * price[0] / 1_000_000, price[1]
        cost_left = budget.cost_usd - spent - input_cost
        if cost_left < 0:
            return None, Exhaustion("cost_usd", spent, budget.cost_usd, Terminal.BUDGET_EXHAUSTED, wanted=spent + input_cost)
        if price[1] > 0:
            limits.append(int(cost_left * 1_000_000 / price[1] * (1 - 1e-9)))  # floor, a hair under: float cost never rounds past the cap
    max_tokens = min(limits) if limits else None
    if max_tokens is not None and max_tokens < 1:
        dimension = "output_tokens" if budget.output_tokens is not None and budget.output_tokens - used_out < 1 else "cost_usd"
        used = used_out if dimension == "output_tokens" else spent
        limit = budget.output_tokens if dimension == "output_tokens" else budget.cost_usd
        assert limit is not None
        wanted = used_out + 1 if dimension == "output_tokens" else spent + input_cost + output_price / 1_000_000
        return None, Exhaustion(dimension, used, limit, Terminal.BUDGET_EXHAUSTED, wanted=wanted)
    return max_tokens, None


MODEL_DIMENSIONS = ("model_turns", "input_tokens", "output_tokens", "cost_usd", "retries")
"""What a model call spends: the dimensions two model phases running at once share."""


def model_share(usage: Mapping[str, Any], budget: Budget, part: int, whole: int) -> Budget:
    """The budget one of several model phases running at once may spend: `part`/`whole` of what each
    model dimension has left, floored, so the phases' spending together cannot pass a cap."""
    shared: dict[str, Any] = {}
    for dimension in MODEL_DIMENSIONS:
        limit = getattr(budget, dimension)
        if limit is None:
            continue
        used = usage.get(dimension, 0)
        left = max(limit - used, 0) * part / whole
        shared[dimension] = used + (left if dimension == "cost_usd" else int(left))
    return budget.model_copy(update=shared)


def result_chars_share(usage: Mapping[str, Any], budget: Budget, calls: int) -> int | None:
    """Characters of tool output one of `calls` calls running together may show the model: an even
    share of what `tool_result_chars` has left, so their sum cannot pass the cap (None: no cap)."""
    if budget.tool_result_chars is None:
        return None
    left = max(budget.tool_result_chars - usage.get("tool_result_chars", 0), 0)
    return left // max(calls, 1)
