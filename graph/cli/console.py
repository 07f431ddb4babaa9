"""cli_console: `boundloop console`, the web console (graph/console/) on a local port.

Registered on the main `boundloop` app by importing this module (graph/cli/app.py does).
"""

from __future__ import annotations

import ipaddress
import os
from typing import Annotated, Optional

import typer

from boundloop.graph.cli.app import DbFlag, app
from boundloop.graph.cli.running import err, guarded
from boundloop.graph.core.errors import ConfigError


@app.command()
def console(
    host: Annotated[str, typer.Option("--host", help="Address to listen on; anything but loopback needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8765,
    token: Annotated[Optional[str], typer.Option("--token", envvar="BOUNDLOOP_CONSOLE_TOKEN", help="Token every client must present (required off loopback).")] = None,
    server: Annotated[Optional[str], typer.Option("--server", help="URL of the LangGraph server that drives server threads, to resume them through its API.")] = None,
    approver: Annotated[str, typer.Option("--as", help="Who decisions made here are recorded as.")] = os.environ.get("USER", "console"),
    database_url: DbFlag = None,
) -> None:
    """Serve the web console: runs, a run's timeline, and the approval inbox."""

    def serve() -> None:
        import uvicorn

        from boundloop.graph.console import ConsoleSettings, create_app  # boundloop.graph.console reuses boundloop.graph.cli.app's decision rules

        if token is None and not _loopback(host):
            raise ConfigError(f"--host {host} is not a loopback address: give a token (--token or BOUNDLOOP_CONSOLE_TOKEN) so only you can decide")
        settings = ConsoleSettings(database_url=database_url, token=token or None, approver=approver, server_url=server)
        err.print(f"console: http://{host}:{port}/console/{'?token=…' if token else ''}  (Ctrl-C stops it)")
        uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")

    guarded(serve)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
