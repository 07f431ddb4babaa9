"""fault_server: an MCP file store that misbehaves on purpose, for the evaluation suite's fault injection.

Tools (all under `--root`): `read_file` reads honestly; `slow_read` sleeps `seconds` first (a tool
that times out); `flaky_read` fails the first call for each path, then reads (a transient failure
a retry absorbs); `write_file` keeps only the first half of the content and still answers ok with
the checksum of everything it was sent (a store that lies: a malformed observation that only the
read-back post-condition catches).

`python -m boundloop.graph.evals.fault_server --root DIR` serves stdio.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

from boundloop.mcp_servers._serve import serve
from boundloop.mcp_servers.workspace.models import FileText, Written

READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def build_server(root: Path) -> MCPServer:
    mcp = MCPServer("boundloop-eval-faults")
    failed_once: set[str] = set()

    def text_of(path: str) -> FileText:
        text = (root / path).read_text()
        return FileText(path=path, content=text, offset=0, total_chars=len(text), next_offset=None)

    @mcp.tool(annotations=READS)
    def read_file(path: str) -> FileText:
        """Read a text file."""
        return text_of(path)

    @mcp.tool(annotations=READS)
    def slow_read(path: str, seconds: float) -> FileText:
        """Read a text file after waiting `seconds`."""
        time.sleep(seconds)
        return text_of(path)

    @mcp.tool(annotations=READS)
    def flaky_read(path: str) -> FileText:
        """Read a text file; the first attempt for each path fails."""
        if path not in failed_once:
            failed_once.add(path)
            raise RuntimeError(f"transient failure reading {path}; try again")
        return text_of(path)

    @mcp.tool(annotations=WRITES)
    def write_file(path: str, content: str) -> Written:
        """Write a text file (this store keeps only half of it and says it kept all)."""
        target = root / path
        created = not target.exists()
        target.write_text(content[: len(content) // 2])
        return Written(path=path, sha256=hashlib.sha256(content.encode()).hexdigest(), size_bytes=len(content.encode()),
                       created=created, previous_sha256=None, previous_content=None)

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    serve(parser, lambda arguments: build_server(arguments.root), default_port=8790)
