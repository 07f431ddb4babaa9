"""`python -m boundloop.mcp_servers.workspace --root DIR [--http --host H --port N]`: serve the workspace tools."""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp.server import MCPServer

from boundloop.mcp_servers._serve import positive, serve
from boundloop.mcp_servers.workspace.server import (
    DEFAULT_MAX_READ_CHARS,
    DEFAULT_MAX_WRITE_BYTES,
    build_server,
)


def _build(args: argparse.Namespace) -> MCPServer:
    return build_server(
        args.root,
        max_read_chars=args.max_read_chars,
        max_write_bytes=args.max_write_bytes,
        journal_dir=args.journal_dir,
        allow_hard_links=args.allow_hard_links,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m boundloop.mcp_servers.workspace", description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="workspace directory (created if missing)")
    parser.add_argument(
        "--max-read-chars",
        type=positive(int),
        default=DEFAULT_MAX_READ_CHARS,
        help="read_file cap (default: %(default)s)",
    )
    parser.add_argument(
        "--max-write-bytes",
        type=positive(int),
        default=DEFAULT_MAX_WRITE_BYTES,
        help="write cap (default: %(default)s)",
    )
    parser.add_argument(
        "--journal-dir",
        type=Path,
        help="where keyed writes are journaled (default: a per-root directory under the system temp dir)",
    )
    parser.add_argument(
        "--allow-hard-links",
        action="store_true",
        help="read and replace files that have more than one hard link (default: refuse them, since "
        "another name of such a file may lie outside the root)",
    )
    serve(parser, _build, default_port=8701)


if __name__ == "__main__":
    main()
