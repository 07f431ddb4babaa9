"""Fixtures for the tool tests: real MCP servers over real stdio and HTTP, and a session-wide
check that every process these tests spawn is gone at the end."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import httpx2
import pytest

from tests.tools._procs import descendants, wait_gone
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers

PYTHON = sys.executable
PROBE_SERVER = str(Path(__file__).parent / "servers" / "probe_server.py")
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
_SPAWNED_BY_THESE_TESTS = ("tests/tools/servers/", "mcp-server-time")


def probe(**keys: Any) -> dict[str, Any]:
    """A stdio mcpServers entry for the probe server; `keys` override or extend it."""
    return {"command": PYTHON, "args": [PROBE_SERVER], "trusted": True, **keys}


def time_server() -> dict[str, Any]:
    """The third-party mcp-server-time, spawned as its real venv script (not uvx)."""
    return {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]}


@pytest.fixture(scope="session", autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail the session if a server process started by the tool tests outlives them."""
    before = set(descendants())
    yield
    spawned = {pid: cmd for pid, cmd in descendants().items()
               if pid not in before and any(mark in cmd for mark in _SPAWNED_BY_THESE_TESTS)}
    alive = {pid: cmd for pid, cmd in spawned.items() if not wait_gone(pid, timeout_s=5.0)}
    if alive:
        pytest.fail(f"processes spawned by tests/tools are still alive after the session: {alive}")


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-logs")


@pytest.fixture(scope="session")
async def shared_bridge(log_dir: Path) -> AsyncIterator[MCPBridge]:
    """One bridge for the tests that do not break their server: the trusted probe server and the
    untrusted third-party time server."""
    servers = load_servers({"mcpServers": {"probe": probe(), "time": time_server()}})
    async with MCPBridge(servers, log_dir=log_dir) as bridge:
        yield bridge


@pytest.fixture
def spawn_http_probe(tmp_path: Path) -> Iterator[Callable[[], tuple[str, subprocess.Popen[str]]]]:
    """Start probe servers over streamable HTTP on free ports; each is killed after the test."""
    started: list[subprocess.Popen[str]] = []

    def spawn() -> tuple[str, subprocess.Popen[str]]:
        log = (tmp_path / f"http-{len(started)}.log").open("w")
        process = subprocess.Popen([PYTHON, PROBE_SERVER, "--http", "--port", "0"],
                                   stdout=subprocess.PIPE, stderr=log, text=True)
        started.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20.0)
        assert ready, "the HTTP probe server printed no URL within 20 s"
        return process.stdout.readline().strip(), process

    yield spawn
    for process in started:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def serve_http(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """`serve_http(script, *args)`: run a test server script as `script PORT *args` on a free
    loopback port until it answers; returns its /mcp URL. Each is killed after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(script: str, *args: str) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = (tmp_path / f"{Path(script).stem}-{port}.log").open("w")
        started.append(subprocess.Popen([PYTHON, script, str(port), *args], stdout=log, stderr=log))
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(300):
            try:
                httpx2.get(url, timeout=1)
                return url
            except httpx2.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"{script} did not answer at {url} within 30 s")

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=10)
