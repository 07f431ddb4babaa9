"""probe_server: a tiny MCP server the tool tests talk to over real stdio and HTTP.

Owns one tool per behaviour the bridge must map: echo (ok + structured), slow (hangs, progress,
counts its cancellations; slow_cancellations reads the count), flaky (hangs then answers), fail
(ToolError), crash (os._exit), write_note (destructive), unannotated, pid. Never used outside tests. `python probe_server.py` serves stdio; `--http --port N` serves
`http://127.0.0.1:N/mcp` and prints that URL on stdout once the socket is bound (port 0 picks one).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

if "--fail-at-start" in sys.argv:  # before the SDK import, so the failing-start tests stay fast
    print("probe_server: refusing to start (--fail-at-start)", file=sys.stderr, flush=True)
    sys.exit(2)

import anyio
import uvicorn
from pydantic import BaseModel
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


class Echo(BaseModel):
    text: str
    length: int


def build_server() -> MCPServer:
    mcp = MCPServer("boundloop-probe", version="0.1.0")

    @mcp.tool(annotations=READ_ONLY)
    def echo(text: str) -> Echo:
        """Return the text and its length."""
        return Echo(text=text, length=len(text))

    cancelled = {"slow": 0}
    cancelled_changed = anyio.Condition()

    @mcp.tool(annotations=READ_ONLY)
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep `seconds`, reporting progress twice; counts the times it was cancelled."""
        await ctx.report_progress(0.0, seconds, "started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                async with cancelled_changed:
                    cancelled["slow"] += 1
                    cancelled_changed.notify_all()
            raise
        await ctx.report_progress(seconds, seconds, "finished")
        return f"slept {seconds}"

    @mcp.tool(annotations=READ_ONLY)
    async def slow_cancellations(at_least: int, wait_s: float = 5.0) -> int:
        """How many `slow` calls were cancelled, waiting up to `wait_s` for at least `at_least`."""
        with anyio.move_on_after(wait_s):
            async with cancelled_changed:
                while cancelled["slow"] < at_least:
                    await cancelled_changed.wait()
        return cancelled["slow"]

    calls_by_key: dict[str, int] = {}

    @mcp.tool(annotations=READ_ONLY)
    async def flaky(key: str, hangs: int) -> str:
        """Hang (until cancelled) on the first `hangs` calls with this key, then answer."""
        calls_by_key[key] = calls_by_key.get(key, 0) + 1
        if calls_by_key[key] <= hangs:
            await anyio.sleep_forever()
        return f"answered on call {calls_by_key[key]}"

    @mcp.tool(annotations=READ_ONLY)
    def fail(message: str = "boom") -> str:
        """Always fail with a message the model can read."""
        raise ToolError(message)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    def crash() -> str:
        """Kill this server process without a reply."""
        os._exit(3)

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False))
    async def write_note(note: str, delay_s: float = 0.0) -> str:
        """Pretend to overwrite the note (destructive), after `delay_s` seconds."""
        await anyio.sleep(delay_s)
        return f"wrote {len(note)} chars"

    @mcp.tool()
    def unannotated(value: int = 0) -> int:
        """A tool with no annotations at all."""
        return value

    @mcp.tool(annotations=READ_ONLY)
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    return mcp


def _serve_http(mcp: MCPServer, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # queue connections from now on, so the printed URL is usable at once
    app = mcp.streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fail-at-start", action="store_true", help="write to stderr and exit 2 (handled above)")
    args = parser.parse_args(argv)
    mcp = build_server()
    if args.http:
        _serve_http(mcp, args.port)
    else:
        mcp.run()


if __name__ == "__main__":
    main()
