"""tools/bridge.py against real MCP servers over real stdio and HTTP: listing, calls, timeouts,
crashes, start failures, cross-task use, parallel calls and process reaping."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from tests.tools._procs import is_alive, wait_gone
from tests.tools.conftest import PROBE_SERVER, PYTHON, probe, time_server
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.errors import ServerStartError
from boundloop.tools.registry import ToolHints


def bridge_for(log_dir: Path, max_reconnects: int = 3, **entries: dict) -> MCPBridge:
    return MCPBridge(load_servers({"mcpServers": entries}), log_dir=log_dir, max_reconnects=max_reconnects)


async def test_stdio_tools_are_listed_with_hints_and_trust(shared_bridge: MCPBridge) -> None:
    """Annotations become hints (spec defaults where absent); trust comes from the config."""
    specs = {spec.qualified_name: spec for spec in shared_bridge.specs()}
    assert specs["probe__echo"].hints == ToolHints(read_only=True, destructive=False, idempotent=True, open_world=False)
    assert specs["probe__write_note"].hints == ToolHints(read_only=False, destructive=True, idempotent=False, open_world=False)
    assert specs["probe__unannotated"].hints == ToolHints.from_annotations(None)
    assert specs["probe__echo"].input_schema["required"] == ["text"]
    assert specs["probe__echo"].description == "Return the text and its length."
    assert specs["probe__echo"].trusted and not specs["time__get_current_time"].trusted


async def test_a_call_returns_text_and_structured_content(shared_bridge: MCPBridge) -> None:
    outcome = await shared_bridge.call("probe", "echo", {"text": "hi"}, timeout_s=10)
    assert (outcome.status, outcome.structured, outcome.attempts) == ("ok", {"text": "hi", "length": 2}, 1)
    assert json.loads(outcome.text) == {"text": "hi", "length": 2}


async def test_a_tool_error_carries_the_servers_text(shared_bridge: MCPBridge) -> None:
    outcome = await shared_bridge.call("probe", "fail", {"message": "disk full"}, timeout_s=10)
    assert (outcome.status, outcome.text) == ("tool_error", "Error executing tool fail: disk full")


async def test_a_hung_tool_times_out_and_the_session_keeps_working(shared_bridge: MCPBridge) -> None:
    """The timeout cancels the call on the server too (notifications/cancelled); the next call on
    the same session succeeds."""
    before = (await shared_bridge.call("probe", "slow_cancellations", {"at_least": 0}, timeout_s=10)).structured["result"]
    outcome = await shared_bridge.call("probe", "slow", {"seconds": 30}, timeout_s=0.3)
    assert outcome.status == "timeout"
    assert outcome.text == (
        "timeout: probe__slow gave no result within 0.3 s, so the call was cancelled. "
        "Ask for less (narrower arguments), or use another tool."
    )
    after = await shared_bridge.call("probe", "slow_cancellations", {"at_least": before + 1}, timeout_s=10)
    assert (after.status, after.structured) == ("ok", {"result": before + 1})


async def test_progress_notifications_reach_the_callback(shared_bridge: MCPBridge) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    outcome = await shared_bridge.call("probe", "slow", {"seconds": 0.05}, timeout_s=10, on_progress=on_progress)
    assert outcome.status == "ok"
    assert seen == [(0.0, 0.05, "started"), (0.05, 0.05, "finished")]


async def test_third_party_time_server_lists_hints_and_answers(shared_bridge: MCPBridge) -> None:
    """mcp-server-time (spawned as its venv script) is untrusted: its read-only claim is kept as a hint only."""
    specs = {spec.qualified_name: spec for spec in shared_bridge.specs() if spec.server == "time"}
    assert sorted(specs) == ["time__convert_time", "time__get_current_time"]
    current = specs["time__get_current_time"]
    assert current.claimed_hints.read_only and not current.trusted
    assert not current.hints.read_only and not current.hints.idempotent  # what the gateway relies on: the worst case
    outcome = await shared_bridge.call("time", "get_current_time", {"timezone": "UTC"}, timeout_s=10)
    assert outcome.status == "ok" and outcome.structured["timezone"] == "UTC"


async def test_parallel_reads_on_one_stdio_session_overlap(shared_bridge: MCPBridge) -> None:
    """Four concurrent slow(0.3) calls through one session all start before any ends: the SDK
    multiplexes requests by id and MCPServer handles each in its own task."""
    spans: list[tuple[float, float]] = []

    async def one() -> None:
        started = time.monotonic()
        outcome = await shared_bridge.call("probe", "slow", {"seconds": 0.3}, timeout_s=10)
        spans.append((started, time.monotonic()))
        assert outcome.status == "ok"

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    assert max(start for start, _ in spans) < min(end for _, end in spans)


async def test_a_crashed_server_gives_server_unavailable_without_hanging(log_dir: Path) -> None:
    """The crash kills the process mid-call: that call and, with no restart allowed, every later one
    end as server_unavailable at once (restarts: tests/faults/test_tool_servers.py)."""
    async with bridge_for(log_dir, max_reconnects=0, victim=probe()) as bridge:
        pid = bridge.pids()["victim"]
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                in_flight: list[str] = []

                async def slow() -> None:
                    in_flight.append((await bridge.call("victim", "slow", {"seconds": 60}, timeout_s=60)).status)

                group.start_soon(slow)
                crash = await bridge.call("victim", "crash", {}, timeout_s=60)
            later = await bridge.call("victim", "echo", {"text": "x"}, timeout_s=60)
        assert (crash.status, in_flight, later.status) == ("server_unavailable", ["server_unavailable"], "server_unavailable")
        assert later.detail == "the connection closed: the server exited, crashed or hung up"
        assert bridge.unavailable() == {"victim": "the connection closed: the server exited, crashed or hung up"}
        assert wait_gone(pid, timeout_s=5)


async def test_a_killed_server_pid_gives_server_unavailable(log_dir: Path) -> None:
    async with bridge_for(log_dir, victim=probe()) as bridge:
        pid = bridge.pids()["victim"]
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid, timeout_s=5)
        with anyio.fail_after(10):
            outcome = await bridge.call("victim", "echo", {"text": "x"}, timeout_s=60)
        assert outcome.status == "server_unavailable"


async def test_a_server_that_exits_at_start_raises_with_its_stderr(log_dir: Path) -> None:
    """The auto handshake fails, the legacy retry fails too, and the error shows the server's own words."""
    bridge = bridge_for(log_dir, broken=probe(args=[PROBE_SERVER, "--fail-at-start"], protocol="auto"))
    with pytest.raises(ServerStartError) as info:
        await bridge.start()
    error = info.value
    assert (error.server, error.cause) == ("broken", "the server exited during the MCP handshake")
    assert error.stderr_tail == "probe_server: refusing to start (--fail-at-start)"
    assert error.target == f"{PYTHON} {PROBE_SERVER} --fail-at-start"
    assert "    | probe_server: refusing to start (--fail-at-start)" in str(error)
    log = Path(error.log_path).read_text()
    assert "(mode=auto)" in log and "(mode=legacy)" in log


async def test_a_missing_command_raises_with_the_fix(log_dir: Path) -> None:
    with pytest.raises(ServerStartError) as info:
        await bridge_for(log_dir, ghost={"command": "/nonexistent/mcp-server"}).start()
    assert str(info.value).splitlines()[0] == "MCP server 'ghost' did not start: command or cwd not found (/nonexistent/mcp-server)"
    assert info.value.fix.startswith("use the absolute path of the server executable")


async def test_a_server_that_never_answers_the_handshake_is_bounded(log_dir: Path) -> None:
    """A process that reads stdin and never writes: both handshakes time out, nothing hangs."""
    silent = {"command": "/bin/sh", "args": ["-c", "cat > /dev/null  # tests/tools/ silent server"], "protocol": "auto"}
    bridge = MCPBridge(load_servers({"mcpServers": {"silent": silent}}), log_dir=log_dir, startup_timeout_s=0.5)
    with anyio.fail_after(15), pytest.raises(ServerStartError) as info:
        await bridge.start()
    assert info.value.cause == "no MCP handshake within 0.5 s"
    assert info.value.fix.startswith("check that the server speaks MCP on stdout (and logs only to stderr)")
    log = Path(info.value.log_path).read_text()
    assert "(mode=auto)" in log and "(mode=legacy)" in log


async def test_an_http_endpoint_that_accepts_but_never_answers_is_bounded(log_dir: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        bridge = MCPBridge(load_servers({"mcpServers": {"mute": {"url": url}}}), log_dir=log_dir, startup_timeout_s=0.5)
        with anyio.fail_after(15), pytest.raises(ServerStartError) as info:
            await bridge.start()
    assert (info.value.server, info.value.target, info.value.cause) == ("mute", url, "no MCP handshake within 0.5 s")


async def test_non_strict_start_keeps_the_good_servers_and_marks_the_rest(log_dir: Path) -> None:
    servers = {"ghost": {"command": "/nonexistent/mcp-server"}, "nohttp": {"url": "http://127.0.0.1:9/mcp"}}
    bridge = bridge_for(log_dir, good=probe(), **servers)
    with anyio.fail_after(20):
        await bridge.start(strict=False)
    try:
        assert {spec.server for spec in bridge.specs()} == {"good"}
        assert bridge.unavailable() == {
            "ghost": "did not start: command or cwd not found (/nonexistent/mcp-server)",
            "nohttp": "did not start: nothing answered at http://127.0.0.1:9/mcp (ConnectError: All connection attempts failed)",
        }
        outcome = await bridge.call("nohttp", "anything", {}, timeout_s=5)
        assert (outcome.status, outcome.attempts) == ("server_unavailable", 0)
        assert (await bridge.call("good", "echo", {"text": "ok"}, timeout_s=5)).status == "ok"
    finally:
        await bridge.close()


async def test_http_server_lists_calls_times_out_and_recovers(log_dir: Path, spawn_http_probe) -> None:
    url, _ = spawn_http_probe()
    async with bridge_for(log_dir, web={"url": url, "headers": {"X-Run": "test"}, "trusted": True}) as bridge:
        specs = {spec.name: spec for spec in bridge.specs()}
        assert specs["echo"].hints.read_only and specs["write_note"].hints.destructive
        assert (await bridge.call("web", "echo", {"text": "hi"}, timeout_s=10)).structured == {"text": "hi", "length": 2}
        assert (await bridge.call("web", "slow", {"seconds": 30}, timeout_s=0.3)).status == "timeout"
        assert (await bridge.call("web", "echo", {"text": "again"}, timeout_s=10)).status == "ok"


async def test_legacy_protocol_works_over_http(log_dir: Path, spawn_http_probe) -> None:
    url, _ = spawn_http_probe()
    async with bridge_for(log_dir, web={"url": url, "protocol": "legacy"}) as bridge:
        assert (await bridge.call("web", "echo", {"text": "old"}, timeout_s=10)).status == "ok"


async def test_a_dead_http_server_gives_server_unavailable_without_hanging(log_dir: Path, spawn_http_probe) -> None:
    url, process = spawn_http_probe()
    async with bridge_for(log_dir, max_reconnects=0, web={"url": url}) as bridge:
        process.kill()
        process.wait(timeout=10)
        with anyio.fail_after(10):
            first = await bridge.call("web", "echo", {"text": "x"}, timeout_s=60)
            second = await bridge.call("web", "echo", {"text": "x"}, timeout_s=60)
        assert (first.status, second.status) == ("server_unavailable", "server_unavailable")
        assert bridge.unavailable()["web"] in {
            "the connection closed: the server exited, crashed or hung up",  # the call saw it first
            "the connection was lost: ConnectError: All connection attempts failed",  # the owner task did
        }


async def test_start_call_and_close_from_three_different_tasks(log_dir: Path) -> None:
    """LangGraph runs each node in its own task: the bridge must not care which task uses it."""
    bridge = bridge_for(log_dir, probe=probe(), time=time_server())
    await asyncio.create_task(bridge.start())
    pids = bridge.pids()
    assert sorted(pids) == ["probe", "time"] and all(is_alive(pid) for pid in pids.values())
    outcome = await asyncio.create_task(bridge.call("probe", "pid", {}, timeout_s=10))
    assert outcome.structured == {"result": pids["probe"]}
    await asyncio.create_task(bridge.close())
    assert [pid for pid in pids.values() if is_alive(pid)] == []
    assert (await bridge.call("probe", "echo", {"text": "x"}, timeout_s=5)).detail == "the bridge is closed"


CRASHING_RUN = textwrap.dedent("""
    import asyncio, json, os, signal, sys
    from pathlib import Path
    from boundloop.tools.bridge import MCPBridge
    from boundloop.tools.config import load_servers

    async def main():
        servers = load_servers(json.loads(sys.argv[1]))
        bridge = MCPBridge(servers, log_dir=Path(sys.argv[2]))
        await bridge.start()
        print(json.dumps(bridge.pids()), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close(), no atexit, no finally

    asyncio.run(main())
""")


def test_servers_exit_when_our_process_is_killed(log_dir: Path) -> None:
    """A SIGKILLed run cannot reap anything; its stdio servers see stdin EOF and exit on their own."""
    config = {"mcpServers": {"probe": probe(), "time": time_server()}}
    run = subprocess.Popen([PYTHON, "-c", CRASHING_RUN, json.dumps(config), str(log_dir)],
                           stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    ready, _, _ = select.select([run.stdout], [], [], 30.0)
    assert ready, "the crashing run printed no pids within 30 s"
    pids = json.loads(run.stdout.readline())
    assert run.wait(timeout=10) == -signal.SIGKILL
    assert sorted(pids) == ["probe", "time"]
    assert {name: wait_gone(pid, timeout_s=10) for name, pid in pids.items()} == {"probe": True, "time": True}
