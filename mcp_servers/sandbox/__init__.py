"""sandbox: an MCP server that runs short Python snippets and commands in a bubblewrap sandbox.

Tools: run_python, run_command, run_tests (not read-only, destructive, not idempotent: code can write files).
Each child runs in its own user, PID, mount, IPC and network namespaces with a read-only view of
the system, its root and a private /tmp writable, CPU, memory, process and file-size limits, a
wall-time timeout that kills its whole PID namespace, and bounded output (see `bubblewrap`);
what the `--hide` globs name under its root is masked (see `masks`).
Run: `python -m boundloop.mcp_servers.sandbox --root DIR [--allow-network] [--hide GLOB]... [limits] [--http --port N]`.
"""

from boundloop.mcp_servers.sandbox.limits import Limits
from boundloop.mcp_servers.sandbox.server import build_server

__all__ = ["Limits", "build_server"]
