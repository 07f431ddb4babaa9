"""launch: start our MCP servers as real processes on real transports, and prove none outlive a test.

`stdio` spawns a server with the SDK's own stdio client; `http` starts one with `--http` on a free
port and waits for uvicorn to say it is listening. Both check, on the way out, that the server
process they started has exited. `exited` waits on a process's end through a pidfd (no polling).
"""

from __future__ import annotations

import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent, Tool

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 15.0
CALL_TIMEOUT_S = 60.0


@asynccontextmanager
async def stdio(server: str, *args: str, command: list[str] | None = None) -> AsyncIterator[tuple[Client, int]]:
    """Serve `mcp_servers.<server>` over stdio; yield the connected client and the server's pid.

    `command` prefixes the Python command line (to start the server inside a wrapper that execs it).
    """
    argv = [*(command or []), sys.executable, "-m", f"boundloop.mcp_servers.{server}", *args]
    before = _children()
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=REPO)
    async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
        (pid,) = _children() - before
        yield client, pid
    assert exited(pid), f"stdio server {server} (pid {pid}) still runs after its client closed"


@contextmanager
def http(server: str, *args: str) -> Iterator[str]:
    """Serve `mcp_servers.<server>` over streamable HTTP on a free loopback port; yield its /mcp URL.

    On the way out the server gets SIGTERM and must shut down gracefully: uvicorn completes its
    shutdown, then re-raises the signal, so the exit status is -SIGTERM.
    """
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", f"boundloop.mcp_servers.{server}", *args, "--http", "--port", str(port)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    log = _Log(process.stderr)
    try:
        log.wait_for(f"Uvicorn running on http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        returncode = process.wait(timeout=EXIT_TIMEOUT_S)
    assert returncode == -signal.SIGTERM, f"HTTP server {server} exited {returncode} on SIGTERM"
    assert any("Application shutdown complete" in line for line in log.all_lines())


def exited(pid: int, timeout_s: float = EXIT_TIMEOUT_S) -> bool:
    """True once process `pid` has ended (a zombie counts as ended), waiting up to `timeout_s`."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)


def hints(tools: list[Tool]) -> dict[str, tuple[bool | None, ...]]:
    """Each annotated tool's (read-only, destructive, idempotent, open-world) hints, as listed."""
    return {
        tool.name: (
            tool.annotations.read_only_hint,
            tool.annotations.destructive_hint,
            tool.annotations.idempotent_hint,
            tool.annotations.open_world_hint,
        )
        for tool in tools
        if tool.annotations is not None
    }


def structured(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call; fails the test with the error text otherwise."""
    assert not result.is_error, error_text(result)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def error_text(result: CallToolResult) -> str:
    """The text the model would read from a failed call."""
    assert result.is_error, f"expected an error, got {result.structured_content}"
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


def _children() -> set[int]:
    """PIDs of this test process's direct children, from /proc."""
    me = str(os.getpid())
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # Fields after the parenthesised command name: state, ppid, ...
            if stat.rsplit(")", 1)[1].split()[1] == me:
                children.add(int(entry))
    return children


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class _Log:
    """The lines of a server's stderr, read by a thread so the pipe never fills."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._seen: list[str] = []
        self._reader = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._reader.start()

    def wait_for(self, marker: str) -> None:
        """Block until a line containing `marker` arrives; fail if the stream ends first."""
        while True:
            line = self._lines.get(timeout=START_TIMEOUT_S)
            assert line is not None, "server exited before it was ready:\n" + "".join(self._seen)
            self._seen.append(line)
            if marker in line:
                return

    def all_lines(self) -> list[str]:
        """Every line, once the stream has ended (after the process exited)."""
        self._reader.join(timeout=EXIT_TIMEOUT_S)
        while (line := self._lines.get_nowait()) is not None:
            self._seen.append(line)
        return self._seen

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)
