"""Provider errors: transient ones retried by our policy (budgeted, traced), an outage ends
UNAVAILABLE_DEP with the reason and resumes, an open model circuit sends nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from boundloop.graph.core.status import Terminal
from tests.faults.conftest import MODEL, trace_of
from tests.graph.fake_openai import ANSWER, FakeOpenAI


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_server_errors_are_retried_by_our_policy_counted_and_traced(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"status": 503}, {"status": 503}]}) as fake:
        report = await run_provider(fake.base_url)
    assert report.status == Terminal.SUCCESS
    assert fake.count("actor") == 4  # two 503s (no client-side retries), then the read and the answer
    assert report.values["usage"]["retries"] == 2
    retries = await trace_of(runner, report, "model_retry")
    assert [event["data"]["retry"] for event in retries] == [1, 2]
    assert all(event["data"]["error"].startswith("HTTP 503 from the provider") for event in retries)
    assert report.values["breakers"]["circuits"][f"model:{MODEL}"] == {"failures": 0, "opened_at": None}


async def test_a_provider_that_cannot_be_reached_ends_unavailable_dep_and_the_run_resumes(run_provider, runner):
    port = _free_port()
    down = await run_provider(f"http://127.0.0.1:{port}/v1", task={"budget": {"retries": 1}})
    assert down.status == Terminal.UNAVAILABLE_DEP and not down.waiting
    assert down.result["reason"].startswith(f"the model {MODEL!r} is unavailable to the planner: cannot reach the provider")
    assert "boundloop resume" in down.result["next_safe_action"]
    assert down.values["usage"]["retries"] == 1 and down.values["usage"]["model_turns"] == 0
    assert (await runner.runs())[0]["status"] == Terminal.UNAVAILABLE_DEP
    with FakeOpenAI(port=port) as fake:
        done = await runner.resume(down.thread_id)
    assert done.status == Terminal.SUCCESS
    assert done.result["output"] == ANSWER
    assert fake.roles == ["planner", "actor", "actor", "critic"]


async def test_an_open_model_circuit_ends_the_run_and_refuses_calls_without_sending_them(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"status": 500}] * 5}) as fake:
        down = await run_provider(fake.base_url)
        assert down.status == Terminal.UNAVAILABLE_DEP
        assert fake.count("actor") == 3  # the circuit opened at the third failure in a row
        assert f"circuit model:{MODEL} is open after 3 failures in a row" in down.result["reason"]
        assert down.values["usage"]["retries"] == 2
        again = await runner.resume(down.thread_id)
        assert again.status == Terminal.UNAVAILABLE_DEP
        assert fake.count("actor") == 3  # refused before anything was sent
        assert again.result["reason"].startswith(f"the model {MODEL!r} is unavailable to the actor: circuit model:{MODEL} is open")


async def test_a_request_the_provider_refuses_is_not_retried(run_provider):
    with FakeOpenAI(faults={"planner": [{"status": 401}]}) as fake:
        down = await run_provider(fake.base_url)
    assert down.status == Terminal.UNAVAILABLE_DEP
    assert "HTTP 401 from the provider" in down.result["reason"]
    assert fake.count("planner") == 1 and down.values["usage"]["retries"] == 0


async def test_a_dropped_connection_is_retried(run_provider):
    with FakeOpenAI(faults={"critic": [{"close": True}]}) as fake:
        report = await run_provider(fake.base_url)
    assert report.status == Terminal.SUCCESS
    assert fake.count("critic") == 2 and report.values["usage"]["retries"] == 1


def test_an_error_of_another_kind_than_the_providers_is_told_apart_without_importing_the_openai_client():
    """A scripted model's error (or any but the client's) is not the provider's: no retry, and the
    openai client, half a second to import, is not loaded to find that out; a malformed body still is."""
    probe = ("import json, sys; from boundloop.graph.models.calls import classify; "
             "assert classify(RuntimeError('not the provider')) is None; "
             "assert classify(json.JSONDecodeError('bad', '', 0)).retryable; "
             "print('openai' in sys.modules)")
    checked = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert (checked.returncode, checked.stdout.strip()) == (0, "False"), checked.stderr
