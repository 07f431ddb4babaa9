"""A provider that reports no usage is counted by estimate, so token and cost budgets still hold."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from boundloop.graph.cli.progress import render_report
from boundloop.graph.models.catalog import CHARS_PER_TOKEN
from boundloop.graph.core.status import Terminal
from tests.faults.conftest import PRICE
from tests.graph.fake_openai import FakeOpenAI


async def test_calls_without_usage_are_counted_by_estimate(run_provider):
    with FakeOpenAI(usage=False) as fake:
        report = await run_provider(fake.base_url)
    assert report.status == Terminal.SUCCESS
    usage = report.values["usage"]
    assert usage["estimated_usage_calls"] == usage["model_turns"] == 4
    planner_request = fake.requests[0]["messages"]
    assert usage["input_tokens"] > sum(math.ceil(len(message["content"]) / CHARS_PER_TOKEN) for message in planner_request)
    assert usage["output_tokens"] > 0
    assert usage["cost_usd"] == pytest.approx((usage["input_tokens"] * PRICE[0] + usage["output_tokens"] * PRICE[1]) / 1_000_000)
    shown = Console(record=True, width=300)
    render_report(shown, report)
    assert "estimated: the provider sent no usage for 4 of 4 model call(s)" in shown.export_text()


async def test_a_token_budget_holds_against_a_provider_without_usage(run_provider):
    with FakeOpenAI(usage=False) as fake:
        report = await run_provider(fake.base_url, task={"budget": {"input_tokens": 1_500}}, unattended=True)
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "input_tokens"
    assert report.values["usage"]["input_tokens"] <= 1_500  # the request that would pass the cap is not sent
    assert fake.count("critic") == 0
