"""runner: start one jailed child, bound its wall time and output, and leave nothing of it running.

Owns the child's command line (through `jail`), environment, pipes, the wall-time timeout and the
process-group kill. Never decides whether a run is allowed: the server does.

The child leads a new session, so it and everything it forks share one process group. The group
is killed with SIGKILL when the child exits (stragglers), when the timeout runs out, and when the
call is cancelled. A descendant that calls setsid() leaves the group and escapes that kill; its
CPU and memory stay bounded by the rlimits it inherited, and the runner stops waiting for its
output shortly after the child itself ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import anyio
from anyio.abc import ByteSendStream

from mcp_servers.sandbox.limits import Limits
from mcp_servers.sandbox.models import RunResult
from mcp_servers.sandbox.output import Capture

JAIL = Path(__file__).with_name("jail.py")
# Once the child has ended, how long to keep reading pipes that an escaped descendant may hold open.
DRAIN_GRACE_S = 1.0
PROBE_TIMEOUT_S = 10.0


def probe_isolation(limits: Limits) -> str | None:
    """Why a child cannot be isolated from the network on this host, or None when it can."""
    probe = subprocess.run(
        [*_jail(limits), "--probe"],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    return None if probe.returncode == 0 else (probe.stderr.strip() or f"jail probe exited {probe.returncode}")


async def run(
    command: list[str], *, cwd: Path, home: Path, stdin: str | None, timeout_s: float, limits: Limits
) -> RunResult:
    """Run `command` in the jail in `cwd`, with HOME set to `home`; return how it ended and its output."""
    stdout, stderr = Capture(limits.output_chars), Capture(limits.output_chars)
    started = time.monotonic()
    process = await anyio.open_process(
        [*_jail(limits), "--", *command],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=_environment(home),
        start_new_session=True,
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
        await process.aclose()
    assert process.returncode is not None
    out, out_cut = stdout.text()
    err, err_cut = stderr.text()
    return RunResult(
        exit_code=process.returncode,
        signal=signal.Signals(-process.returncode).name if process.returncode < 0 else None,
        stdout=out,
        stderr=err,
        timed_out=deadline.cancelled_caught,
        truncated=out_cut or err_cut,
        duration_ms=duration_ms,
    )


def _jail(limits: Limits) -> list[str]:
    # -I -S: the jail runs on the standard library alone, untouched by the environment or site-packages.
    return [sys.executable, "-I", "-S", str(JAIL), *limits.jail_flags()]


def _environment(home: Path) -> dict[str, str]:
    """A small, fixed environment: the server's own variables (database URLs, keys) never reach a child."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",  # output written before a kill is still captured
        "PYTHONDONTWRITEBYTECODE": "1",
    }


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
