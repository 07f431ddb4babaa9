"""runner: start one sandboxed child, bound its wall time and output, and leave nothing of it running.

Owns the pipes, the wall-time timeout and the kill. Never decides whether a run is allowed (the
server does) nor what the child sees (`bubblewrap` does).

The process started is bwrap, in a new session. Everything the command forks lives in bwrap's PID
namespace, whose init dies with bwrap (`--die-with-parent`) and with the command, taking every
process of the namespace with it, even ones that called setsid() and forked again. bwrap's group
is killed with SIGKILL when the timeout runs out and when the call is cancelled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

import anyio
from anyio.abc import ByteSendStream

from boundloop.mcp_servers.sandbox.bubblewrap import Sandbox
from boundloop.mcp_servers.sandbox.models import RunResult
from boundloop.mcp_servers.sandbox.output import Capture
from boundloop.mcp_servers.sandbox.reaper import reap_adopted

# Once bwrap has ended, how long to keep reading pipes (nothing of the sandbox outlives bwrap).
DRAIN_GRACE_S = 1.0
# bwrap reports a command killed by signal N as exit status 128 + N, as a shell does.
_SIGNALLED = range(129, 129 + 64)


async def run(sandbox: Sandbox, command: list[str], *, cwd: Path, stdin: str | None, timeout_s: float) -> RunResult:
    """Run `command` in `sandbox` in `cwd`; return how it ended and its output."""
    limits = sandbox.limits
    stdout, stderr = Capture(limits.output_chars), Capture(limits.output_chars)
    argv = await anyio.to_thread.run_sync(sandbox.argv, command, cwd)  # finding what to mask walks the root
    started = time.monotonic()
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env={"PATH": os.defpath},  # the server's variables (database URLs, keys) never reach bwrap
        start_new_session=True,
        **sandbox.spawn_options(),
    )
    try:
        async with anyio.create_task_group() as pipes:
            assert process.stdout is not None and process.stderr is not None
            pipes.start_soon(stdout.drain, process.stdout)
            pipes.start_soon(stderr.drain, process.stderr)
            if stdin is not None:
                assert process.stdin is not None
                pipes.start_soon(_feed, process.stdin, stdin.encode())
            with anyio.move_on_after(timeout_s) as deadline:
                await process.wait()
            duration_ms = round((time.monotonic() - started) * 1000)
            _kill_group(process.pid)
            pipes.cancel_scope.deadline = anyio.current_time() + DRAIN_GRACE_S
    finally:
        _kill_group(process.pid)
        with anyio.CancelScope(shield=True):  # a cancelled call still reaps what it started
            await process.aclose()
            await anyio.to_thread.run_sync(reap_adopted)
    assert process.returncode is not None
    exit_code = -(process.returncode - 128) if process.returncode in _SIGNALLED else process.returncode
    out, out_cut = stdout.text()
    err, err_cut = stderr.text()
    return RunResult(
        exit_code=exit_code,
        signal=_signal_name(-exit_code) if exit_code < 0 else None,
        stdout=out,
        stderr=err,
        timed_out=deadline.cancelled_caught,
        truncated=out_cut or err_cut,
        duration_ms=duration_ms,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal
        return f"signal {number}"


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    """Write stdin and close it; a child that exits without reading it all is not an error."""
    try:
        await stream.send(data)
        await stream.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError):  # the group is already empty
        os.killpg(pgid, signal.SIGKILL)
