"""Budget arithmetic: usage sums, and each check trips exactly at its bound, not before."""

from __future__ import annotations

import pytest

from boundloop.graph.core.budget import (
    Budget,
    add_usage,
    check_before_model_call,
    check_before_tool_call,
    empty_usage,
    reserve_model_call,
)
from boundloop.graph.core.profiles import PROFILES, budget_for
from boundloop.graph.core.status import Terminal


def test_usage_deltas_from_parallel_tasks_sum_per_counter_and_per_map_key():
    total = add_usage(add_usage(None, {"tool_calls": 1, "per_tool": {"a": 1}}), {"tool_calls": 2, "per_tool": {"a": 1, "b": 1}})
    assert total["tool_calls"] == 3
    assert total["per_tool"] == {"a": 2, "b": 1}


@pytest.mark.parametrize("dimension", ["model_turns", "input_tokens", "output_tokens", "cost_usd"])
def test_each_model_dimension_allows_the_call_below_its_bound_and_refuses_it_at_the_bound(dimension):
    budget = Budget(**{dimension: 5})
    below, at = {**empty_usage(), dimension: 4}, {**empty_usage(), dimension: 5}
    assert check_before_model_call(below, budget) is None
    exhaustion = check_before_model_call(at, budget)
    assert (exhaustion.dimension, exhaustion.code) == (dimension, Terminal.BUDGET_EXHAUSTED)
    assert exhaustion.message == f"budget.{dimension} exhausted: 5 of 5 used."


def test_wall_clock_trips_as_timeout():
    exhaustion = check_before_model_call({**empty_usage(), "wall_clock_s": 10.0}, Budget(wall_clock_s=10))
    assert exhaustion.code == Terminal.TIMEOUT


def test_an_unpriced_model_call_trips_a_cost_budget_instead_of_counting_as_free():
    usage = {**empty_usage(), "unpriced_model_calls": 1}
    assert check_before_model_call(usage, Budget(cost_usd=100.0)).dimension == "cost_usd"
    assert check_before_model_call(usage, Budget(cost_usd=None)) is None


@pytest.mark.parametrize(
    ("limits", "usage", "dimension"),
    [
        ({"tool_calls": 3}, {"tool_calls": 3}, "tool_calls"),
        ({"tool_calls_per_tool": 2}, {"per_tool": {"w__x": 2}}, "tool_calls_per_tool"),
        ({"tool_calls_per_server": 2}, {"per_server": {"w": 2}}, "tool_calls_per_server"),
        ({"side_effects": 1}, {"side_effects": 1}, "side_effects"),
        ({"tool_result_chars": 10}, {"tool_result_chars": 10}, "tool_result_chars"),
    ],
)
def test_each_tool_dimension_refuses_the_call_at_its_bound(limits, usage, dimension):
    exhaustion = check_before_tool_call({**empty_usage(), **usage}, Budget(**limits), tool="w__x", server="w", has_side_effect=True)
    assert exhaustion.dimension == dimension
    one_less = {key: (value - 1 if isinstance(value, int) else {k: v - 1 for k, v in value.items()}) for key, value in usage.items()}
    assert check_before_tool_call({**empty_usage(), **one_less}, Budget(**limits), tool="w__x", server="w", has_side_effect=True) is None


def test_a_read_only_call_is_not_charged_to_the_side_effect_budget():
    usage = {**empty_usage(), "side_effects": 1}
    assert check_before_tool_call(usage, Budget(side_effects=1), tool="t", server="s", has_side_effect=False) is None


def test_profiles_carry_seed_001_numbers_and_every_dimension_can_be_overridden():
    assert PROFILES["sre_agent"].tool_calls == 15
    assert PROFILES["research_assistant"].wall_clock_s == 300
    assert budget_for("sre_agent", {"tool_calls": 99, "cost_usd": None}).model_dump() == {
        **PROFILES["sre_agent"].model_dump(), "tool_calls": 99, "cost_usd": None
    }


@pytest.mark.parametrize(("limits", "usage", "tokens", "price"), [
    ({"cost_usd": 0.003}, {"cost_usd": 0.002}, 4000, (1.0, 0.0)),       # the input alone passes the cap
    ({"cost_usd": 0.003}, {"cost_usd": 0.0029}, 100, (1.0, 10.0)),      # the input fits, no output token does
    ({"input_tokens": 1000}, {"input_tokens": 900}, 2500, None),
])
def test_a_call_refused_on_its_measured_request_is_hinted_a_limit_that_admits_it(limits, usage, tokens, price):
    budget = Budget.model_validate(limits)
    _, exhaustion = reserve_model_call(usage, budget, input_tokens=tokens, price=price)
    assert exhaustion is not None
    hinted = float(exhaustion.next_safe_action.split("=")[-1].rstrip(").").strip())
    larger = Budget.model_validate({exhaustion.dimension: hinted})
    assert reserve_model_call(usage, larger, input_tokens=tokens, price=price)[1] is None
