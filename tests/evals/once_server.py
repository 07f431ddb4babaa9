"""once_server: an MCP server whose one tool fails the first time it is ever called under `--state`.

The failure is remembered in a file, so it outlives the server process: two runs of one scenario
see different outcomes (the first a tool error, the second ok), which a replay scenario must report.
Used only by the eval command's tests. `python once_server.py --state DIR` serves stdio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from boundloop.mcp_servers._serve import serve

READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def build_server(state: Path) -> MCPServer:
    mcp = MCPServer("boundloop-test-once")

    @mcp.tool(annotations=READS)
    def check_in() -> str:
        """Answer "checked in"; the very first call under this state directory fails."""
        marker = state / "called"
        if not marker.exists():
            marker.write_text("1")
            raise ToolError("first call under this state directory: failing once on purpose")
        return "checked in"

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, required=True)
    serve(parser, lambda arguments: build_server(arguments.state), default_port=8791)
