"""Dispatch through the real graph: reads run together, writes one at a time in proposed order."""

from __future__ import annotations

import sys
from pathlib import Path

from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step

PROBE_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


async def test_parallel_reads_overlap_and_writes_serialize_in_proposed_order(run_script, workspace):
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "probe": {"command": sys.executable, "args": [str(PROBE_SERVER)], "trusted": True},
    }}
    calls = [
        {"name": "probe__slow", "args": {"seconds": 0.3}},
        {"name": "probe__slow", "args": {"seconds": 0.31}},
        {"name": "workspace__write_file", "args": {"path": "a.md", "content": "first"}},
        {"name": "workspace__write_file", "args": {"path": "a.md", "content": "second"}},
    ]
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=calls), step("done")], "critic": [CRITIC_PASS]},
        servers=servers,
    )
    assert report.status == Terminal.SUCCESS
    seen = {obs["call_id"]: obs for obs in report.values["observations"]}
    read_a, read_b, write_1, write_2 = (seen[f"a0.{n}"] for n in range(4))
    assert max(read_a["started_at"], read_b["started_at"]) < min(read_a["ended_at"], read_b["ended_at"])
    assert write_1["ended_at"] <= write_2["started_at"]
    assert (workspace / "a.md").read_text() == "second"
