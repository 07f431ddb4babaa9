"""A hung model or tool call is cut at the run's deadline; a slow request is timed out and retried.

How long a run takes to start (its MCP servers) depends on the machine's load, and the start is
bounded by the wall-clock budget, so the deadline tests first let the run trip a model-turn budget
of zero right after intake, then grant it turns and the time it has used plus a few seconds: the
hang then starts with a known amount of budget left.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from boundloop.graph.core import deadline
from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.core.status import Terminal
from tests.faults.conftest import trace_of
from tests.graph.fake_openai import ANSWER, FakeOpenAI

LEFT_S = 3.0
"""Seconds of budget the run has left when the hang starts."""
PROBE = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


TRIP = {"model_turns": 0}
"""The budget a deadline test's run starts with: it stops for an extension right after intake."""


async def _grant(runner: Runner, waiting: RunReport, seconds: float) -> tuple[RunReport, float]:
    """Answer the extension request with model turns and `seconds` more than used; return the report and the new wall-clock limit."""
    [item] = waiting.interrupts
    assert item["value"]["type"] == "budget_extension" and item["value"]["dimension"] in ("model_turns", "wall_clock_s")
    limit = waiting.values["usage"]["wall_clock_s"] + seconds
    grant = {"wall_clock_s": limit, "model_turns": 30}
    return await runner.resume(waiting.thread_id, decisions={item["id"]: {"grant": grant}}), limit


def within(limit: float, used: float) -> bool:
    """The cut step ended at its deadline, the reserve before the limit, and its bookkeeping kept within the limit."""
    return limit - deadline.reserve_s(limit) <= used <= limit


async def test_a_hung_model_call_is_cut_at_the_run_deadline_and_the_run_continues_with_more_time(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"hang_s": 45}]}) as fake:
        tripped = await run_provider(fake.base_url, task={"budget": TRIP})
        started = time.monotonic()
        cut, limit = await _grant(runner, tripped, LEFT_S)
        assert time.monotonic() - started < LEFT_S + 10  # not the 45 s the provider hung
        assert cut.status == Terminal.TIMEOUT and cut.waiting
        assert fake.count("actor") == 1
        assert "The actor call was cut off" in cut.values["ending"]["reason"]
        assert within(limit, cut.values["usage"]["wall_clock_s"]), cut.values["usage"]["wall_clock_s"]
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
        tripped = await run_provider(fake.base_url, task={"budget": TRIP}, servers=servers)
        cut, limit = await _grant(runner, tripped, LEFT_S + 7)  # the servers start lazily on resume, within the budget
    assert cut.status == Terminal.TIMEOUT
    [observation] = cut.values["observations"]
    assert (observation["tool"], observation["status"]) == ("probe__slow", "timeout")
    assert observation["attempts"] == 1  # a read-only call, but no retry once the deadline has passed
    assert within(limit, cut.values["usage"]["wall_clock_s"]), cut.values["usage"]["wall_clock_s"]


async def test_a_request_slower_than_the_model_timeout_is_cancelled_and_retried(run_provider, runner):
    with FakeOpenAI(faults={"actor": [{"hang_s": 45}]}) as fake:
        report = await run_provider(fake.base_url, model_timeout_s=0.5)
    assert report.status == Terminal.SUCCESS
    assert fake.count("actor") == 3  # the hung request, then the read, then the answer
    assert report.values["usage"]["retries"] == 1
    [retry] = await trace_of(runner, report, "model_retry")
    assert retry["node"] == "act"
    assert retry["data"]["role"] == "actor" and retry["data"]["error"] == "no reply within 0.5 s (model_timeout_s)"
