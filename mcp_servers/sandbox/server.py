"""server: the sandbox MCP server, short Python snippets and commands run in a bubblewrap sandbox.

Owns the tool surface (names, titles, descriptions, parameters, annotations) and the decision whether
a run may start: the sandbox works here (asked of `bubblewrap` once, at startup); code and stdin
sizes; `cwd` a directory beneath the root, reached without following a symlink. Never spawns or
limits a process itself: `runner` and `bubblewrap` do.

Where bubblewrap cannot confine a child (not installed, no user namespaces, a root that the sandbox
user cannot reach), the server still starts, says why in one line on stderr, and refuses every run
with that reason. There is no way to run snippets unconfined: a sandbox that silently is not one
is worse than none.

No `from __future__ import annotations` here: the SDK reads each tool's annotations at
registration, and some of them name values local to `build_server`.
"""

import os
import secrets
import stat
import sys
from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from boundloop.mcp_servers._shipped import ShippedServer
from boundloop.mcp_servers.sandbox.bubblewrap import Sandbox, prepare
from boundloop.mcp_servers.sandbox.limits import Limits
from boundloop.mcp_servers.sandbox.junit import parse_junit
from boundloop.mcp_servers.sandbox.models import RunResult, TestReport
from boundloop.mcp_servers.sandbox.reaper import adopt_orphans
from boundloop.mcp_servers.sandbox.runner import run
from boundloop.mcp_servers.workspace.beneath import Beneath
from boundloop.mcp_servers.workspace.files import os_errors
from boundloop.mcp_servers.workspace.paths import parts

DEFAULT_TIMEOUT_S = 30.0
PYTHON = "python3"
"""The interpreter of run_python: the system's, found on the sandbox's PATH (/usr/local/bin:/usr/bin:/bin)."""
# One argv string may hold at most 128 KiB on Linux (MAX_ARG_STRLEN); the code travels as one.
MAX_CODE_BYTES = 100_000
MAX_STDIN_BYTES = 1_000_000

UNAVAILABLE = "sandbox: snippets cannot be confined on this host, so every run will be refused: {reason}"
NOT_CONFINED = "nothing was run: the sandbox cannot confine snippets on this host ({reason})"
TOO_LARGE = "{name} is {size} bytes; the sandbox accepts at most {limit}; {fix}"
NOT_A_DIRECTORY = "cwd {path!r} is not a directory in the sandbox root; pass a directory, e.g. '.'"
NO_REPORT = "pytest wrote no test report (exit code {exit_code}): {reason}; {fix}"
NO_PYTEST = "is pytest installed for the sandbox's python3? (Debian: apt-get install python3-pytest)"
MAX_REPORT_BYTES = 5_000_000
Cwd = Annotated[
    str,
    Field(description="Working directory, relative to the sandbox root.", json_schema_extra={"x-boundloop-resource": "path"}),
]


def build_server(root: Path, limits: Limits, hidden: tuple[str, ...] = ()) -> MCPServer:
    """A sandbox server running children in `root` (created if missing) under `limits`, with what
    the `hidden` globs name under the root masked in every child's view."""
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    beneath = Beneath(root)
    adopt_orphans()
    sandbox = prepare(root, limits, hidden)
    if isinstance(sandbox, str):
        print(UNAVAILABLE.format(reason=sandbox), file=sys.stderr, flush=True)
    runs = ToolAnnotations(
        read_only_hint=False,  # code can write files in the root
        destructive_hint=True,
        idempotent_hint=False,
        open_world_hint=limits.allow_network,
    )
    network = "with network access" if limits.allow_network else "without network"
    mcp = ShippedServer(
        "boundloop-sandbox",
        instructions=(
            f"Runs short Python snippets and commands in a bubblewrap sandbox whose only writable places are "
            f"{root} and a private /tmp, {network}, limited to {limits.cpu_s} CPU s, {limits.memory_mb} MiB of "
            f"memory, {limits.max_processes} processes, {limits.file_size_mb} MiB per written file and "
            f"{limits.output_chars} characters of stdout and of stderr."
        ),
    )
    Timeout = Annotated[
        float,
        Field(gt=0, le=limits.max_timeout_s, description="Wall-time limit in seconds; the sandbox is killed then."),
    ]
    default_timeout_s = min(DEFAULT_TIMEOUT_S, limits.max_timeout_s)

    def confined() -> Sandbox:
        if isinstance(sandbox, str):
            raise ToolError(NOT_CONFINED.format(reason=sandbox))
        return sandbox

    @mcp.tool(title="Run Python code", annotations=runs)
    async def run_python(
        code: Annotated[
            str,
            Field(
                description="Python source to run with `python3 -c`, as a fresh interpreter.",
                json_schema_extra={"x-boundloop-resource": "code"},
            ),
        ],
        stdin: Annotated[str | None, Field(description="Text fed to the program's standard input.")] = None,
        timeout_s: Timeout = default_timeout_s,
    ) -> RunResult:
        """Run a Python snippet with the system's python3 in the sandbox root; return its exit code and output.

        The sandbox has no network, sees the system read-only, can write only its root and a private
        /tmp, and has bounded CPU time, memory, processes and file sizes; at the wall-time timeout
        everything it started is killed. stdout and stderr are cut in the middle past the server's
        limit (`truncated`). Files it writes in the root persist. Code is limited to 100 kB; write
        longer programs to a file and use run_command.
        """
        active = confined()
        _check_size("code", code, MAX_CODE_BYTES, "write it to a file and run it with run_command")
        if stdin is not None:
            _check_size("stdin", stdin, MAX_STDIN_BYTES, "pass a file path instead")
        return await run(active, [PYTHON, "-c", code], cwd=root, stdin=stdin, timeout_s=timeout_s)

    @mcp.tool(title="Run a command", annotations=runs)
    async def run_command(
        argv: Annotated[
            list[str],
            Field(
                min_length=1,
                description="Program and arguments, e.g. ['pytest', '-q']; no shell is involved.",
                json_schema_extra={"x-boundloop-resource": "command"},
            ),
        ],
        cwd: Cwd = ".",
        timeout_s: Timeout = default_timeout_s,
    ) -> RunResult:
        """Run a program (looked up on the sandbox's PATH) with arguments in the sandbox; return exit code and output.

        No shell: pipes, globs and variables are not expanded. Same sandbox and limits as run_python.
        Exit code 127 with a 'failed to execute' message means the program is not on PATH.
        """
        active = confined()
        names = parts(beneath, cwd)
        _require_directory(beneath, names, cwd)
        return await run(active, argv, cwd=root.joinpath(*names), stdin=None, timeout_s=timeout_s)

    @mcp.tool(title="Run the tests", annotations=runs)
    async def run_tests(
        paths: Annotated[
            list[str],
            Field(description="Test files or directories, relative to cwd, as pytest takes them; empty: pytest's own discovery."),
        ] = [],
        cwd: Cwd = ".",
        timeout_s: Timeout = default_timeout_s,
    ) -> TestReport:
        """Run pytest on the given tests in the sandbox; return the counts and, per failing test, its name, expected and actual values and file:line.

        Same sandbox and limits as run_command. `location` of a failure is where the assertion
        failed; `expected`/`actual` are filled when the assertion compares with `==`.
        """
        active = confined()
        names = parts(beneath, cwd)
        _require_directory(beneath, names, cwd)
        report = f".boundloop-junit-{secrets.token_hex(8)}.xml"
        argv = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1", f"--junitxml={report}", "--", *paths]
        ran = await run(active, argv, cwd=root.joinpath(*names), stdin=None, timeout_s=timeout_s)
        output = ran.stdout + (f"\n[stderr]\n{ran.stderr}" if ran.stderr else "")
        try:
            counts = parse_junit(_take_report(beneath, names, report))
        except (OSError, ValueError) as error:
            fix = NO_PYTEST if ran.exit_code != 0 and "No module named pytest" in ran.stderr else "see the output: " + output[-500:]
            raise ToolError(NO_REPORT.format(exit_code=ran.exit_code, reason=getattr(error, "strerror", None) or error, fix=fix)) from error
        return TestReport(exit_code=ran.exit_code, passed=counts.passed, failed=counts.failed, errors=counts.errors, skipped=counts.skipped,
                          failures=counts.failures, output=output, timed_out=ran.timed_out, duration_ms=ran.duration_ms)

    return mcp


def _require_directory(beneath: Beneath, names: tuple[str, ...], cwd: str) -> None:
    with os_errors(cwd):
        handle = beneath.open(names, os.O_PATH)
        try:
            is_directory = stat.S_ISDIR(os.fstat(handle).st_mode)
        finally:
            os.close(handle)
    if not is_directory:
        raise ToolError(NOT_A_DIRECTORY.format(path=cwd))


def _take_report(beneath: Beneath, names: tuple[str, ...], report: str) -> str:
    """Read and remove the report the run wrote, never following a link the sandboxed code put in its place."""
    with beneath.directory(names) as directory:
        handle = beneath.open([report], os.O_RDONLY, dir_fd=directory)
        try:
            with os.fdopen(os.dup(handle), "rb") as file:
                data = file.read(MAX_REPORT_BYTES + 1)
        finally:
            os.close(handle)
            os.unlink(report, dir_fd=directory)
    if len(data) > MAX_REPORT_BYTES:
        raise ValueError(f"the report is larger than {MAX_REPORT_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _check_size(name: str, text: str, limit: int, fix: str) -> None:
    size = len(text.encode())
    if size > limit:
        raise ToolError(TOO_LARGE.format(name=name, size=size, limit=limit, fix=fix))
