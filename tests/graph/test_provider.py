"""The OpenAI-compatible provider path, against a local fake endpoint (the only stand-in: the model)."""

from __future__ import annotations

import pytest

from boundloop.graph.core.status import Terminal
from tests.graph.fake_openai import FakeOpenAI


async def test_a_run_through_an_openai_compatible_endpoint_counts_tokens_and_cost(run_script, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with FakeOpenAI() as fake:
        report = await run_script({}, model="fake-model", script=None, base_url=fake.base_url, prices={"fake-model": (2.0, 8.0)})
    assert report.status == Terminal.SUCCESS
    assert report.result["output"] == "Ana publishes the notes."
    usage = report.values["usage"]
    assert fake.roles == ["actor", "actor"]  # a simple task: no planner, no judge (no criteria), nothing triggers the critic
    assert (usage["model_turns"], usage["input_tokens"], usage["output_tokens"]) == (2, 2000, 200)
    assert usage["cost_usd"] == pytest.approx(2 * (1000 * 2.0 + 100 * 8.0) / 1_000_000)
    actor_request = fake.requests[0]
    assert "workspace__read_file" in [tool["function"]["name"] for tool in actor_request["tools"]]
    assert fake.headers[0]["authorization"] == "Bearer sk-test-key"
    assert report.values["boundary"]["model"] == "fake-model"
