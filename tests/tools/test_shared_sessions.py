"""Runs of one process share a `shared` server's process per identical config, and leave none behind."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from boundloop.graph.services import Services
from tests.leftovers import server_processes
from tests.tools._procs import wait_gone


def workspace(tmp_path: Path, name: str) -> dict[str, str]:
    root = tmp_path / name
    root.mkdir()
    (root / "notes.md").write_text(f"notes of {name}\n")
    return {"workspace_root": str(root)}


def servers_of(root: str) -> list[str]:
    return [line for line in server_processes() if "boundloop.mcp_servers.workspace" in line and root in line]


async def read(services: Services, run_id: str, settings: dict[str, str]) -> str:
    bridge = await services.bridge(run_id, settings)
    outcome = await bridge.call("workspace", "read_file", {"path": "notes.md"}, timeout_s=10)
    assert outcome.status == "ok", outcome.text
    return outcome.text


async def test_runs_share_one_server_per_root_and_none_outlives_the_services(tmp_path: Path) -> None:
    services = Services()
    one, other = workspace(tmp_path, "one"), workspace(tmp_path, "other")
    try:
        assert "notes of one" in await read(services, "run-a", one)
        assert "notes of one" in await read(services, "run-b", one)  # concurrently with run-a
        assert len(servers_of(one["workspace_root"])) == 1
        first = (await services.bridge("run-a", one)).pids()["workspace"]
        assert (await services.bridge("run-b", one)).pids()["workspace"] == first

        await services.close_run("run-a")
        await services.close_run("run-b")
        assert "notes of one" in await read(services, "run-c", one)  # a later run: still the same process
        assert (await services.bridge("run-c", one)).pids()["workspace"] == first

        assert "notes of other" in await read(services, "run-d", other)  # another root: its own server
        assert (await services.bridge("run-d", other)).pids()["workspace"] != first
        assert len(servers_of(one["workspace_root"])) == len(servers_of(other["workspace_root"])) == 1
    finally:
        await services.aclose()
    assert servers_of(one["workspace_root"]) == servers_of(other["workspace_root"]) == []


async def test_a_shared_server_that_died_is_started_again_for_the_next_run(tmp_path: Path) -> None:
    services = Services()
    one = workspace(tmp_path, "one")
    try:
        await read(services, "run-a", one)
        dead = (await services.bridge("run-a", one)).pids()["workspace"]
        await services.close_run("run-a")
        os.kill(dead, signal.SIGKILL)
        assert wait_gone(dead, timeout_s=5.0)
        assert "notes of one" in await read(services, "run-b", one)
        assert (await services.bridge("run-b", one)).pids()["workspace"] != dead
        assert len(servers_of(one["workspace_root"])) == 1
    finally:
        await services.aclose()
    assert servers_of(one["workspace_root"]) == []


async def test_a_server_not_marked_shared_gets_a_process_per_run(tmp_path: Path) -> None:
    services = Services()
    root = workspace(tmp_path, "one")["workspace_root"]
    entry = {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", root], "trusted": True}
    settings = {"servers": {"mcpServers": {"workspace": entry}}}
    try:
        await read(services, "run-a", settings)
        await read(services, "run-b", settings)
        assert len(servers_of(root)) == 2
    finally:
        await services.aclose()
    assert servers_of(root) == []
