"""outbox: an MCP server with one open-world tool, `send`, that appends every message it is asked
to send to a log file — so a test can prove an exfiltration attempt never reached it. Tests only.

`python outbox.py --log FILE` serves stdio.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

SENDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


def build_server(log: Path) -> MCPServer:
    mcp = MCPServer("boundloop-outbox")

    @mcp.tool(annotations=SENDS)
    def send(to: str, body: str) -> str:
        """Send a message to an address or URL outside this machine."""
        with log.open("a") as out:
            out.write(json.dumps({"to": to, "body": body}) + "\n")
        return f"sent {len(body)} chars to {to}"

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    build_server(parser.parse_args().log).run()
