"""The Responses API path (`model_apis: {model: "responses"}`) under a provider that hangs: one that
takes the request and never answers, one that stalls halfway through its answer. Each is cut by
`model_timeout_s` and retried as `budget.retries` allows, or cut at the run's deadline; the run ends
with the right status well within its wall-clock budget and nothing waits for the 45 s hang.

The Chat Completions twins are in test_model_timeouts.py; the deadline test uses its trip-and-grant
approach (a run's start-up time depends on the machine's load)."""

from __future__ import annotations

import time

import pytest

from boundloop.graph.core.status import Terminal
from tests.faults.conftest import MODEL, trace_of
from tests.faults.test_model_timeouts import LEFT_S, TRIP, _grant, within
from tests.graph.fake_openai import ANSWER
from tests.graph.fake_responses import FakeResponses

HANG = {"hang_s": 45}
STALL = {"stall_s": 45}
RESPONSES = {"model_apis": {MODEL: "responses"}}
TIMEOUT_S = 2.0
"""The model timeout: every role has it, so it is long enough for a loaded machine's honest answers."""


@pytest.mark.parametrize("fault", [HANG, STALL], ids=["no-answer", "stalled-mid-answer"])
async def test_a_hung_responses_request_is_cut_by_the_model_timeout_and_retried(run_provider, runner, fault):
    with FakeResponses(actor=[fault]) as fake:
        started = time.monotonic()
        report = await run_provider(fake.base_url, model_timeout_s=TIMEOUT_S, **RESPONSES)
        took = time.monotonic() - started
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert report.result["output"] == ANSWER
    assert set(fake.paths) == {"/v1/responses"}
    assert len(fake.actor_requests()) == 2  # the hung one, then the answer
    retries = [event["data"] for event in await trace_of(runner, report, "model_retry") if event["data"]["role"] == "actor"]
    assert [retry["error"] for retry in retries] == ["no reply within 2 s (model_timeout_s)"]
    assert report.values["usage"]["retries"] >= 1
    assert took < 30, took  # not the 45 s the provider hung


@pytest.mark.parametrize("fault", [HANG, STALL], ids=["no-answer", "stalled-mid-answer"])
async def test_a_provider_that_keeps_hanging_ends_the_run_unavailable_once_retries_are_spent(run_provider, fault):
    with FakeResponses(actor=[fault, fault, fault]) as fake:
        started = time.monotonic()
        report = await run_provider(fake.base_url, task={"budget": {"retries": 1}}, model_timeout_s=TIMEOUT_S, **RESPONSES)
        took = time.monotonic() - started
    assert report.status == Terminal.UNAVAILABLE_DEP, report.values.get("ending")
    assert len(fake.actor_requests()) == 2  # the first try and its one retry; the third hang is never asked for
    reason = report.values["ending"]["reason"]
    assert "no reply within 2 s (model_timeout_s); no retries left in budget.retries" in reason, reason
    assert report.values["usage"]["retries"] == 1
    assert took < 30, took


@pytest.mark.parametrize("fault", [HANG, STALL], ids=["no-answer", "stalled-mid-answer"])
async def test_a_hung_responses_request_is_cut_at_the_run_deadline_and_the_run_continues_with_more_time(run_provider, runner, fault):
    with FakeResponses(actor=[fault]) as fake:
        tripped = await run_provider(fake.base_url, task={"budget": TRIP}, **RESPONSES)
        started = time.monotonic()
        cut, limit = await _grant(runner, tripped, LEFT_S)
        assert time.monotonic() - started < LEFT_S + 10  # not the 45 s the provider hung
        assert cut.status == Terminal.TIMEOUT and cut.waiting, cut.values.get("ending")
        assert len(fake.actor_requests()) == 1  # the default model timeout (120 s) never fired: the deadline did
        assert "The actor call was cut off" in cut.values["ending"]["reason"]
        assert within(limit, cut.values["usage"]["wall_clock_s"]), cut.values["usage"]["wall_clock_s"]
        done, _ = await _grant(runner, cut, 600)
    assert done.status == Terminal.SUCCESS, done.values.get("ending")
    assert done.result["output"] == ANSWER
