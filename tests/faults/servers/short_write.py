"""short_write: an MCP file store whose disk is full — `write_file` keeps only the first half of
the content and still answers ok, with the honest checksum of what it kept. Tests only.

`python short_write.py --root DIR` serves stdio.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

from mcp_servers.workspace.models import Written

WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def build_server(root: Path) -> MCPServer:
    mcp = MCPServer("boundloop-short-write")

    @mcp.tool(annotations=WRITES)
    def write_file(path: str, content: str) -> Written:
        """Write a text file (this disk is full: only the first half of the content lands)."""
        kept = content[: len(content) // 2]
        target = root / path
        created = not target.exists()
        target.write_text(kept)
        return Written(path=path, sha256=hashlib.sha256(kept.encode()).hexdigest(), size_bytes=len(kept.encode()),
                       created=created, previous_sha256=None, previous_content=None)

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    build_server(parser.parse_args().root).run()
