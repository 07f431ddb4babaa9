"""`python -m boundloop.mcp_servers.records [--database-url URL] [--http --host H --port N]`: serve the record tools.

The URL defaults to the environment variable BOUNDLOOP_RECORDS_URL.
"""

from __future__ import annotations

import argparse
import os

from mcp.server import MCPServer

from boundloop.mcp_servers._serve import serve
from boundloop.mcp_servers.records.server import build_server

URL_VARIABLE = "BOUNDLOOP_RECORDS_URL"


def _build(args: argparse.Namespace) -> MCPServer:
    return build_server(args.database_url)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m boundloop.mcp_servers.records", description=__doc__)
    default_url = os.environ.get(URL_VARIABLE)
    parser.add_argument(
        "--database-url",
        default=default_url,
        required=default_url is None,
        help=f"PostgreSQL URL of the record store (default: ${URL_VARIABLE})",
    )
    serve(parser, _build, default_port=8702)


if __name__ == "__main__":
    main()
