"""A hung model or tool call is cut at the run's deadline; a slow request is timed out and retried.

How long a run takes to start (its MCP servers) depends on the machine's load, so the deadline
tests first let the run trip a tiny wall-clock budget right after intake, then grant it the time
it has used plus a few seconds: the hang then starts with a known amount of budget left.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.core.status import Terminal
from tests.faults.conftest import trace_of
from tests.graph.fake_openai import ANSWER, FakeOpenAI

LEFT_S = 3.0
"""Seconds of budget the run has left when the hang starts."""
MARGIN_S = 0.5
"""How far past its budget the cut step may end (graph/models/README.md, Timeouts)."""
PROBE = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


async def _grant(runner: Runner, waiting: RunReport, seconds: float) -> tuple[RunReport, float]:
    """Answer the wall-clock extension request with `seconds` more than used; return the report and the new limit."""
    [item] = waiting.interrupts
    assert item["value"]["type"] == "budget_extension" and item["value"]["dimension"] == "wall_clock_s"
    limit = item["value"]["used"] + seconds
    return await runner.resume(waiting.thread_id, decisions={item["id"]: {"grant": {"wall_clock_s": limit}}}), limit


async def test_a_hung_model_call_is_cut_at_the_run_deadline_and_the_run_continues_with_more_time(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"hang_s": 45}]}) as fake:
        tripped = await run_provider(fake.base_url, task={"budget": {"wall_clock_s": 0.001}})
        started = time.monotonic()
        cut, limit = await _grant(runner, tripped, LEFT_S)
        assert time.monotonic() - started < LEFT_S + 10  # not the 45 s the provider hung
        assert cut.status == Terminal.TIMEOUT and cut.waiting
        assert fake.count("actor") == 1
        assert "The actor call was cut off" in cut.values["ending"]["reason"]
        assert limit <= cut.values["usage"]["wall_clock_s"] < limit + MARGIN_S
        done, _ = await _grant(runner, cut, 600)
    assert done.status == Terminal.SUCCESS
    assert done.result["output"] == ANSWER


async def test_a_hung_tool_call_is_cut_at_the_run_deadline(run_provider, runner, workspace):
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "probe": {"command": sys.executable, "args": [str(PROBE)], "trusted": True},
    }}
    hang = {"tool_calls": [{"name": "probe__slow", "arguments": json.dumps({"seconds": 45})}]}
    with FakeOpenAI(faults={"actor": [hang]}) as fake:
        tripped = await run_provider(fake.base_url, task={"budget": {"wall_clock_s": 0.001}}, servers=servers)
        cut, limit = await _grant(runner, tripped, LEFT_S)
    assert cut.status == Terminal.TIMEOUT
    [observation] = cut.values["observations"]
    assert (observation["tool"], observation["status"]) == ("probe__slow", "timeout")
    assert observation["attempts"] == 1  # a read-only call, but no retry once the deadline has passed
    assert limit <= cut.values["usage"]["wall_clock_s"] < limit + MARGIN_S


async def test_a_request_slower_than_the_model_timeout_is_cancelled_and_retried(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"hang_s": 45}]}) as fake:
        report = await run_provider(fake.base_url, model_timeout_s=0.5)
    assert report.status == Terminal.SUCCESS
    assert fake.count("actor") == 3  # the hung request, then the read, then the answer
    assert report.values["usage"]["retries"] == 1
    [retry] = await trace_of(runner, report, "model_retry")
    assert retry["node"] == "act"
    assert retry["data"]["role"] == "actor" and retry["data"]["error"] == "no reply within 0.5 s (model_timeout_s)"
