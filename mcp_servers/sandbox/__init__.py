"""sandbox: an MCP server that runs short Python snippets and commands in a locked-down child process.

Tools: run_python, run_command (not read-only, destructive, not idempotent: code can write files).
Each child gets CPU, memory and file-size rlimits, a wall-time timeout that kills its process
group, bounded output, and no network (a fresh user + network namespace; see `jail`).
Run: `python -m mcp_servers.sandbox --root DIR [--allow-network] [limits] [--http --port N]`.
"""

from mcp_servers.sandbox.limits import Limits
from mcp_servers.sandbox.server import build_server

__all__ = ["Limits", "build_server"]
