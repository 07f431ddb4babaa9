"""The sandbox runs code with its output captured and every limit enforced by the kernel, with no network.

What it keeps in (the host's files, sockets, processes) is tested in tests/security/test_sandbox_escape.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from boundloop.mcp_servers.sandbox.bubblewrap import NOT_INSTALLED
from boundloop.mcp_servers.sandbox.server import NOT_CONFINED, UNAVAILABLE
from boundloop.mcp_servers.workspace.paths import OUTSIDE_ROOT
from tests.mcp_servers.launch import REPO, error_text, hints, http, stdio, structured
from tests.mcp_servers.sandboxes import all_gone, searchable_root, sleeper, token

# Starts the server in a user namespace that may create no further namespaces: the host "forbids" isolation.
NO_NAMESPACES = ["unshare", "--user", "--map-root-user", "sh", "-c",
                 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"']  # fmt: skip


@pytest.fixture
def root() -> Iterator[Path]:
    with searchable_root() as path:
        yield path


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on loopback in the test's own network."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


@asynccontextmanager
async def sandbox(root: Path, *flags: str) -> AsyncIterator[Client]:
    async with stdio("sandbox", "--root", str(root), *flags) as (client, _):
        yield client


async def run_python(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    return structured(await client.call_tool("run_python", {"code": code, **arguments}))


def connect_code(listener: socket.socket) -> str:
    port = listener.getsockname()[1]
    return f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"


async def test_tools_are_listed_as_destructive_and_closed_world(root: Path) -> None:
    """Code can write files, so neither tool is read-only or idempotent; without network it is closed-world."""
    async with sandbox(root) as client:
        tools = (await client.list_tools()).tools
    assert hints(tools) == {name: (False, True, False, False) for name in ("run_python", "run_command", "run_tests")}
    assert all(tool.title and tool.description and tool.output_schema for tool in tools)


async def test_run_python_captures_exit_code_stdout_stderr_and_feeds_stdin(root: Path) -> None:
    """The result carries the exit code and both streams exactly; stdin reaches the program."""
    code = "import sys; print('out'); print('err', file=sys.stderr); print(sys.stdin.read().upper()); sys.exit(3)"
    async with sandbox(root) as client:
        result = await run_python(client, code, stdin="hello")
    assert {key: result[key] for key in ("exit_code", "signal", "stdout", "stderr", "timed_out", "truncated")} == {
        "exit_code": 3,
        "signal": None,
        "stdout": "out\nHELLO\n",
        "stderr": "err\n",
        "timed_out": False,
        "truncated": False,
    }


async def test_the_wall_timeout_kills_everything_the_snippet_started(root: Path) -> None:
    """A grandchild the snippet started dies with it; the file it wrote proves it ran."""
    mark = token()
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['python3', '-c', {sleeper(mark)!r}])\n"
        "open('started', 'w').close()\n"
        "time.sleep(600)\n"
    )
    async with sandbox(root) as client:
        result = await run_python(client, code, timeout_s=2)
    assert (result["timed_out"], result["signal"]) == (True, "SIGKILL")
    assert (root / "started").exists()
    assert all_gone(mark)


async def test_processes_left_behind_by_a_finished_run_are_killed(root: Path) -> None:
    """A background process the snippet leaves behind does not outlive the run."""
    mark = token()
    code = f"import subprocess; subprocess.Popen(['python3', '-c', {sleeper(mark)!r}])"
    async with sandbox(root) as client:
        result = await run_python(client, code)
    assert (result["exit_code"], result["timed_out"]) == (0, False)
    assert all_gone(mark)


async def test_cancelling_a_call_mid_run_kills_everything_it_started(root: Path) -> None:
    """The snippet starts a grandchild and says so through a FIFO; then the caller gives up."""
    os.mkfifo(root / "started")
    os.chmod(root / "started", 0o666)  # the sandbox runs as another user
    mark = token()
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['python3', '-c', {sleeper(mark)!r}])\n"
        "open('started', 'w').write('yes')\n"
        "time.sleep(600)\n"
    )
    async with sandbox(root) as client, anyio.create_task_group() as call:
        call.start_soon(client.call_tool, "run_python", {"code": code, "timeout_s": 120})
        with anyio.fail_after(60):
            started = await anyio.to_thread.run_sync((root / "started").read_text, abandon_on_cancel=True)
        call.cancel_scope.cancel()
    assert started == "yes"
    assert all_gone(mark)


async def test_the_cpu_limit_stops_a_busy_loop_with_sigxcpu(root: Path) -> None:
    """The kernel ends a run at its CPU-second limit, well before the wall-time timeout."""
    async with sandbox(root, "--cpu-s", "1") as client:
        result = await run_python(client, "while True: pass", timeout_s=60)
    assert (result["signal"], result["timed_out"]) == ("SIGXCPU", False)


async def test_the_memory_limit_makes_a_large_allocation_fail(root: Path) -> None:
    """An allocation beyond the address-space limit fails inside the child, as a MemoryError."""
    async with sandbox(root, "--memory-mb", "256") as client:
        result = await run_python(client, "bytearray(1024 ** 3)")
    assert result["exit_code"] == 1
    assert result["stderr"].endswith("MemoryError\n")


async def test_the_file_size_limit_stops_a_large_write(root: Path) -> None:
    """The write fails at the limit and the file holds exactly the allowed bytes."""
    async with sandbox(root, "--file-size-mb", "1") as client:
        result = await run_python(client, "open('big', 'wb').write(bytes(2 * 1024 * 1024))")
    assert result["stderr"].endswith("OSError: [Errno 27] File too large\n")
    assert (root / "big").stat().st_size == 1024 * 1024


async def test_long_output_is_cut_in_the_middle_and_marked_truncated(root: Path) -> None:
    """The head and the tail survive within the budget; the marker says how much there was."""
    async with sandbox(root, "--output-chars", "100") as client:
        result = await run_python(client, "print('a' * 5000 + 'END')")
    assert result["truncated"] is True
    assert result["stdout"].startswith("a" * 50)
    assert result["stdout"].endswith("a" * 46 + "END\n")
    assert "output truncated: 5004 bytes in all" in result["stdout"]


async def test_a_child_cannot_reach_a_socket_listening_on_loopback(root: Path, listener: socket.socket) -> None:
    """In its own network namespace the child's loopback is its own: nothing of the host's listens there."""
    async with sandbox(root) as client:
        result = await run_python(client, connect_code(listener))
    assert result["exit_code"] == 1
    assert result["stderr"].endswith("ConnectionRefusedError: [Errno 111] Connection refused\n")
    with pytest.raises(BlockingIOError):
        listener.accept()


async def test_with_allow_network_the_same_child_connects(root: Path, listener: socket.socket) -> None:
    """The control for the test above: the listener is reachable when isolation is waived."""
    async with sandbox(root, "--allow-network") as client:
        tools = (await client.list_tools()).tools
        result = await run_python(client, connect_code(listener))
    assert result["exit_code"] == 0
    accepted, _ = listener.accept()
    accepted.close()
    assert all(tool.annotations and tool.annotations.open_world_hint for tool in tools)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
async def test_without_user_namespaces_nothing_runs(root: Path) -> None:
    """Where the sandbox cannot be built the server refuses every run, with the reason."""
    async with stdio("sandbox", "--root", str(root), command=NO_NAMESPACES) as (client, _):
        result = await client.call_tool("run_python", {"code": "open('ran', 'w')"})
    prefix = NOT_CONFINED.format(reason="").removesuffix("()")
    assert error_text(result).startswith(f"Error executing tool run_python: {prefix}(")
    assert not (root / "ran").exists()


async def test_without_bubblewrap_the_server_says_so_in_one_line_and_runs_nothing(root: Path) -> None:
    """bwrap is looked up on PATH: with none there, startup prints the fix and every call names it."""
    without_bwrap = ["env", "PATH=/nonexistent"]
    argv = [*without_bwrap, sys.executable, "-m", "boundloop.mcp_servers.sandbox", "--root", str(root)]
    startup = subprocess.run(argv, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    async with stdio("sandbox", "--root", str(root), command=without_bwrap) as (client, _):
        result = await client.call_tool("run_command", {"argv": ["touch", "ran"]})
    assert (startup.returncode, startup.stderr) == (0, UNAVAILABLE.format(reason=NOT_INSTALLED) + "\n")
    assert error_text(result) == "Error executing tool run_command: " + NOT_CONFINED.format(reason=NOT_INSTALLED)
    assert not (root / "ran").exists()


async def test_run_command_runs_argv_without_a_shell_in_a_confined_cwd(root: Path) -> None:
    """Arguments reach the program literally, and cwd goes through the workspace confinement."""
    (root / "sub").mkdir()
    async with sandbox(root) as client:
        inside = structured(await client.call_tool("run_command", {"argv": ["pwd"], "cwd": "sub"}))
        literal = structured(await client.call_tool("run_command", {"argv": ["echo", "$HOME", "*"]}))
        outside = await client.call_tool("run_command", {"argv": ["pwd"], "cwd": "../"})
    assert inside["stdout"] == f"{root.resolve()}/sub\n"
    assert literal["stdout"] == "$HOME *\n"
    assert error_text(outside) == "Error executing tool run_command: " + OUTSIDE_ROOT.format(path="../")


async def test_run_command_reports_a_missing_program_as_exit_127(root: Path) -> None:
    """As a shell would, with a message naming the program (from prlimit, which starts it)."""
    async with sandbox(root) as client:
        result = structured(await client.call_tool("run_command", {"argv": ["no-such-program"]}))
    assert (result["exit_code"], result["stderr"]) == (
        127,
        "prlimit: failed to execute no-such-program: No such file or directory\n",
    )


async def test_the_sandbox_is_served_over_streamable_http(root: Path) -> None:
    """The same tools answer at /mcp when the server runs with --http."""
    with http("sandbox", "--root", str(root)) as url:
        async with Client(url) as client:
            result = await run_python(client, "print(6 * 7)")
    assert result["stdout"] == "42\n"
