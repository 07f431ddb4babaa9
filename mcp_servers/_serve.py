"""_serve: the shared half of every server's command line.

Owns the `--http/--host/--port` flags, running a built server on stdio or streamable HTTP, and the
argument type for limits (`positive`). Never builds a server or knows its tools: each `__main__`
adds its own flags and a build function.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TypeVar

from mcp.server import MCPServer

Number = TypeVar("Number", int, float)


def positive(kind: Callable[[str], Number]) -> Callable[[str], Number]:
    """An argparse type for a limit: `kind` parsed from the text, refused unless above zero."""

    def parse(text: str) -> Number:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not above zero; limits must be positive")
        return value

    return parse


def serve(
    parser: argparse.ArgumentParser,
    build: Callable[[argparse.Namespace], MCPServer],
    *,
    default_port: int,
    argv: Sequence[str] | None = None,
) -> None:
    """Parse `argv`, build the server and serve it until its transport closes.

    Over stdio the server returns when stdin reaches end of file, so a client that closes the pipe
    leaves no process behind. Over HTTP it serves `http://HOST:PORT/mcp` until SIGINT or SIGTERM.
    """
    transport = parser.add_argument_group("transport (stdio unless --http)")
    transport.add_argument(
        "--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    transport.add_argument(
        "--host", default="127.0.0.1", help="HTTP bind address (default: %(default)s, loopback only)"
    )
    transport.add_argument("--port", type=int, default=default_port, help="HTTP port (default: %(default)s)")
    args = parser.parse_args(argv)
    server = build(args)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")
