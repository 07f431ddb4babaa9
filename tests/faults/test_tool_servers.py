"""A tool server that dies is restarted within bounds, and a server's own timeout_s applies.

Real MCP servers over stdio (the probe server); the timeout case runs through the real graph.
"""

from __future__ import annotations

import json
import sys

from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, step
from tests.tools.conftest import PROBE_SERVER, probe
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers


async def test_a_crashed_server_is_restarted_on_its_next_call_at_most_max_reconnects_times(tmp_path):
    bridge = MCPBridge(load_servers({"mcpServers": {"probe": probe()}}), log_dir=tmp_path, max_reconnects=2)
    await bridge.start()
    try:
        first = (await bridge.call("probe", "pid", {}, timeout_s=10)).structured["result"]
        crashed = await bridge.call("probe", "crash", {}, timeout_s=10)
        assert crashed.status == "server_unavailable" and crashed.attempts == 1
        after = await bridge.call("probe", "pid", {}, timeout_s=10)
        assert after.status == "ok" and after.structured["result"] != first
        assert bridge.unavailable() == {}

        assert (await bridge.call("probe", "crash", {}, timeout_s=10)).status == "server_unavailable"  # restart 2 of 2 ...
        assert (await bridge.call("probe", "crash", {}, timeout_s=10)).status == "server_unavailable"  # ... and it dies again
        gone = await bridge.call("probe", "pid", {}, timeout_s=10)
        assert gone.status == "server_unavailable" and gone.attempts == 0  # no third restart
        assert "connection closed" in gone.text
    finally:
        await bridge.close()
    closed = await bridge.call("probe", "pid", {}, timeout_s=10)
    assert closed.status == "server_unavailable" and closed.attempts == 0  # a closed bridge restarts nothing
    logs = [path for path in tmp_path.iterdir() if path.name.startswith("probe.")]
    assert len(logs) == 1 and logs[0].read_text().count("--- boundloop: starting 'probe'") == 3


async def test_a_servers_own_timeout_s_bounds_its_tool_calls(runner, tmp_path):
    """The run's tool_timeout_s is the default (30 s); the probe's entry says 1 s, and that wins."""
    servers = {"mcpServers": {"probe": {"command": sys.executable, "args": [PROBE_SERVER], "trusted": True, "timeout_s": 1}}}
    # The step promises no tool: a call that timed out leaves a step that needs it failed (tests/faults/test_grounding.py).
    plan = {"content": {"steps": [{"id": "wait", "description": "Wait"}], "blocked": None},
            "usage": {"input_tokens": 100, "output_tokens": 20}}
    roles = {"planner": [plan], "actor": [step(calls=[{"name": "probe__slow", "args": {"seconds": 8}}]), step("waited")],
             "critic": [CRITIC_PASS]}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-timeouts", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), servers=servers, workspace_root=str(tmp_path))
    report = await runner.start(Task(goal="wait for the probe"), settings)
    assert report.status == Terminal.SUCCESS
    call = next(obs for obs in report.values["observations"] if obs["call_id"] == "a0.0")
    assert call["status"] == "timeout"
    assert "within 1 s" in call["excerpt"]


def test_the_timeout_s_of_a_server_must_be_a_positive_finite_number():
    for bad in (0, -3, float("nan"), float("inf")):
        try:
            load_servers({"mcpServers": {"probe": probe(timeout_s=bad)}})
        except Exception as error:  # ConfigError, one line per problem
            assert "timeout_s" in str(error)
        else:
            raise AssertionError(f"timeout_s={bad} was accepted")


async def test_a_run_whose_server_crashed_restarts_it_at_the_next_call_through_the_check_before_dispatch(runner, tmp_path):
    """A call is dispatched only after its server lists its tools again (tools/pinning.py): that
    listing must restart a dead server, as the call itself would, or the run loses the server for good."""
    plan = {"content": {"steps": [{"id": "probe", "description": "Probe the server"}], "blocked": None},
            "usage": {"input_tokens": 100, "output_tokens": 20}}
    pid = {"name": "probe__pid", "args": {}}
    roles = {"planner": [plan], "actor": [step(calls=[pid]), step(calls=[{"name": "probe__crash", "args": {}}]), step(calls=[pid]),
                                          step("probed")], "critic": [CRITIC_PASS]}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-restarts", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), servers={"mcpServers": {"probe": probe()}}, workspace_root=str(tmp_path))
    report = await runner.start(Task(goal="probe the server across a crash"), settings)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    observations = report.values["observations"]
    assert [(obs["tool"], obs["status"]) for obs in observations] == [
        ("probe__pid", "ok"), ("probe__crash", "server_unavailable"), ("probe__pid", "ok")]
    first, after = (obs["excerpt"] for obs in (observations[0], observations[2]))
    assert first != after, "the last call must reach a new server process"
