"""A server's sampling request is answered under the deadline of the tool call it came during, not
under the one of the step in which the server's connection happened to start (its receive loop
runs in that step's context, which may be long over)."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import types

from boundloop.graph.core import deadline
from boundloop.graph.calls import scope as mcp_scope
from boundloop.graph.core.budget import Budget
from boundloop.graph.services import Services
from tests.graph.conftest import step

ADVISE = types.CreateMessageRequestParams(
    messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="advise"))], max_tokens=50)


async def test_sampling_waits_under_the_calls_deadline_not_the_connections(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-sampling", "roles": {"sampler": [step("keep it short", tokens=(40, 7))]}}))
    payload = {"settings": {"model": "scripted", "script": str(script)}, "budget": Budget().model_dump(), "usage": {}, "breakers": {}}
    spent: dict = {}
    with deadline.step_deadline(60):  # the tool call's step: a minute left
        sample = mcp_scope._sampler(payload, Services(), spent)

    async def on_the_receive_loop() -> types.CreateMessageResult:
        with deadline.step_deadline(0):  # the step the connection started in: over
            return await sample(ADVISE)

    result = await asyncio.create_task(on_the_receive_loop())
    assert result.content.text == "keep it short"
    assert spent["usage"]["calls_by_role"] == {"sampler": 1}


async def test_a_request_refused_after_an_answered_one_leaves_that_one_charged_once(tmp_path):
    """The call's second request would pass `input_tokens` with the first's 40: it is refused, and
    what the tool call spent stays the first request's cost, counted once."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-sampling", "roles": {"sampler": [step("keep it short", tokens=(40, 7))]}}))
    payload = {"settings": {"model": "scripted", "script": str(script)}, "budget": Budget(input_tokens=60).model_dump(), "usage": {}, "breakers": {}}
    spent: dict = {}
    with deadline.step_deadline(60):
        sample = mcp_scope._sampler(payload, Services(), spent)
    await sample(ADVISE)
    long = types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="advise " * 40))], max_tokens=50)
    with pytest.raises(mcp_scope.SamplingRefused, match="the run's model did not answer"):
        await sample(long)
    assert spent["usage"]["calls_by_role"] == {"sampler": 1} and spent["usage"]["input_tokens"] == 40
