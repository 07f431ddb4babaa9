"""server: the sandbox MCP server, short Python snippets and commands run in a locked-down child process.

Owns the tool surface (names, titles, descriptions, parameters, annotations) and the decision whether
a run may start: network isolation works here (asked of `runner` once, at startup) or was waived with
--allow-network; code and stdin sizes; `cwd` confined to the root by `workspace.paths.confine`. Never
spawns or limits a process itself: `runner` and `jail` do.

The root is only the working directory: a child runs with the server's user rights and can read and
write whatever that user can. Confinement here is of resources and network, not of the filesystem.

No `from __future__ import annotations` here: the SDK reads each tool's annotations at
registration, and some of them name values local to `build_server`.
"""

import sys
from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_servers.sandbox.limits import Limits
from mcp_servers.sandbox.models import RunResult
from mcp_servers.sandbox.runner import probe_isolation, run
from mcp_servers.workspace.paths import confine

DEFAULT_TIMEOUT_S = 30.0
# One argv string may hold at most 128 KiB on Linux (MAX_ARG_STRLEN); the code travels as one.
MAX_CODE_BYTES = 100_000
MAX_STDIN_BYTES = 1_000_000

NO_ISOLATION = (
    "nothing was run: this sandbox cannot cut children off from the network here ({reason}); "
    "restart the sandbox server with --allow-network to run code with network access, "
    "or on a host that permits user namespaces"
)
TOO_LARGE = "{name} is {size} bytes; the sandbox accepts at most {limit}; {fix}"
NOT_A_DIRECTORY = "cwd {path!r} is not a directory in the sandbox root; pass a directory, e.g. '.'"


def build_server(root: Path, limits: Limits) -> MCPServer:
    """A sandbox server running children in `root` (created if missing) under `limits`."""
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    isolation_missing = None if limits.allow_network else probe_isolation(limits)
    runs = ToolAnnotations(
        read_only_hint=False,  # code can write files in (and, within the user's rights, beyond) the root
        destructive_hint=True,
        idempotent_hint=False,
        open_world_hint=limits.allow_network,
    )
    network = "with network access" if limits.allow_network else "without network"
    mcp = MCPServer(
        "boundloop-sandbox",
        instructions=(
            f"Runs short Python snippets and commands in {root}, {network}, limited to {limits.cpu_s} CPU s, "
            f"{limits.memory_mb} MiB of memory, {limits.file_size_mb} MiB per written file and "
            f"{limits.output_chars} characters of stdout and of stderr."
        ),
    )
    Timeout = Annotated[
        float,
        Field(
            gt=0, le=limits.max_timeout_s, description="Wall-time limit in seconds; the process group is killed then."
        ),
    ]
    default_timeout_s = min(DEFAULT_TIMEOUT_S, limits.max_timeout_s)

    def refuse_unless_isolated() -> None:
        if isolation_missing is not None:
            raise ToolError(NO_ISOLATION.format(reason=isolation_missing))

    @mcp.tool(title="Run Python code", annotations=runs)
    async def run_python(
        code: Annotated[
            str,
            Field(
                description="Python source to run with `python -c`, as a fresh interpreter.",
                json_schema_extra={"x-boundloop-resource": "code"},
            ),
        ],
        stdin: Annotated[str | None, Field(description="Text fed to the program's standard input.")] = None,
        timeout_s: Timeout = default_timeout_s,
    ) -> RunResult:
        """Run a Python snippet in a fresh interpreter in the sandbox root and return its exit code and output.

        The child has no network, bounded CPU time, memory and file sizes, and a wall-time timeout
        after which its whole process group is killed. stdout and stderr are cut in the middle past
        the server's limit (`truncated`). It starts in the sandbox root, and files it writes
        persist. Code is limited to 100 kB; write longer programs to a file and use run_command.
        """
        refuse_unless_isolated()
        _check_size("code", code, MAX_CODE_BYTES, "write it to a file and run it with run_command")
        if stdin is not None:
            _check_size("stdin", stdin, MAX_STDIN_BYTES, "pass a file path instead")
        return await run(
            [sys.executable, "-c", code], cwd=root, home=root, stdin=stdin, timeout_s=timeout_s, limits=limits
        )

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
        cwd: Annotated[
            str,
            Field(
                description="Working directory, relative to the sandbox root.",
                json_schema_extra={"x-boundloop-resource": "path"},
            ),
        ] = ".",
        timeout_s: Timeout = default_timeout_s,
    ) -> RunResult:
        """Run a program (looked up on PATH) with arguments in the sandbox and return its exit code and output.

        No shell: pipes, globs and variables are not expanded. Same limits as run_python: no network,
        bounded CPU time, memory and file sizes, a wall-time timeout that kills the whole process
        group, and stdout/stderr cut in the middle past the server's limit. Exit code 127 with a
        'command not found' message means the program is not on PATH.
        """
        refuse_unless_isolated()
        directory = confine(root, cwd)
        if not directory.is_dir():
            raise ToolError(NOT_A_DIRECTORY.format(path=cwd))
        return await run(argv, cwd=directory, home=root, stdin=None, timeout_s=timeout_s, limits=limits)

    return mcp


def _check_size(name: str, text: str, limit: int, fix: str) -> None:
    size = len(text.encode())
    if size > limit:
        raise ToolError(TOO_LARGE.format(name=name, size=size, limit=limit, fix=fix))
