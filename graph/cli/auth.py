"""cli_auth: `boundloop auth SERVER`, the OAuth login for an HTTP MCP server whose config sets
`"oauth": true` (tools/oauth.py).

Starts a one-shot callback listener on a free loopback port, prints the server's authorization
URL to open in a browser, waits for the redirect back with the code, and lets the SDK exchange it;
the tokens are stored encrypted in the database, where runs read (and refresh) them. Each login
forgets the server's earlier tokens and client registration first. The redirect's `code`, `state`
and `iss` (RFC 9207: which authorization server answered) all go to the SDK, which refuses a
mismatched state or issuer, and a missing issuer the server said it sends; a refused login is one
line and a non-zero exit, and stores nothing.

Registered on the main `boundloop` app by importing this module (graph/cli/app.py does).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import parse_qs, urlparse

import typer

from boundloop.graph.cli.app import DbFlag, app
from boundloop.graph.cli.running import err, guarded
from boundloop.graph.core.errors import BoundloopError, ConfigError
from boundloop.tools.config import load_servers

if TYPE_CHECKING:
    from mcp.client.auth import OAuthFlowError

LOGIN_TIMEOUT_S = 300.0
REFUSED = "OAuth login to {name!r} refused: {reason}; nothing was stored. Check the servers file's url, and log in again"


class LoginRefused(BoundloopError):
    """The OAuth flow refused the authorization response (state or issuer mismatch, no code...)."""


PAGE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nboundloop: authorized. You can close this window.\n"


@app.command()
def auth(
    server: Annotated[str, typer.Argument(help="Name of the server in the servers file.")],
    servers: Annotated[Path, typer.Option("--servers", help="MCP servers file in the mcpServers JSON shape.")],
    database_url: DbFlag = None,
) -> None:
    """Log in to an HTTP MCP server with OAuth; its tokens are stored encrypted (BOUNDLOOP_TOKEN_KEY)."""
    # The SDK logs a refused flow with its traceback before raising it; the refusal is our one line.
    logging.getLogger("mcp.client.auth").addHandler(logging.NullHandler())

    def login() -> None:
        from boundloop.checkpoints.pool import database_url as default_database_url

        asyncio.run(_login(server, servers, database_url or default_database_url()))

    guarded(login)


async def _login(name: str, servers_file: Path, url: str) -> None:
    # the SDK, its HTTP client and OAuth, and cryptography: loaded by this command only
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult

    from boundloop.checkpoints.pool import open_pool
    from boundloop.tools import oauth

    configs = load_servers(servers_file)
    config = configs.get(name)
    if config is None:
        raise ConfigError(f"no server {name!r} in {servers_file}; known: {', '.join(sorted(configs)) or 'none'}")
    if not config.oauth:
        raise ConfigError(f"server {name!r} does not set \"oauth\": true in {servers_file}; add it to log in with OAuth")
    codes: asyncio.Queue[AuthorizationCodeResult] = asyncio.Queue()

    async def on_callback(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readline()).decode("latin-1").split(" ")
        query = parse_qs(urlparse(request[1] if len(request) > 1 else "").query)
        writer.write(PAGE)
        await writer.drain()
        writer.close()
        if "code" in query:
            first = {key: values[0] for key, values in query.items() if values}
            await codes.put(AuthorizationCodeResult(code=first["code"], state=first.get("state"), iss=first.get("iss")))

    listener = await asyncio.start_server(on_callback, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]

    async def show(authorization_url: str) -> None:
        err.print(f"Open this URL to authorize boundloop for {name!r}:\n{authorization_url}", soft_wrap=True, highlight=False)

    async def wait_for_code() -> AuthorizationCodeResult:
        return await asyncio.wait_for(codes.get(), LOGIN_TIMEOUT_S)

    pool = await open_pool(url)
    try:
        vault = oauth.TokenVault(pool, name)
        await vault.forget()
        login = oauth.provider(str(config.url), vault, redirect_uri=f"http://127.0.0.1:{port}{oauth.CALLBACK_PATH}",
                               redirect_handler=show, callback_handler=wait_for_code)
        try:
            async with listener, httpx2.AsyncClient(headers=config.headers, auth=login, timeout=30) as http:
                async with Client(streamable_http_client(str(config.url), http_client=http), mode="legacy") as client:
                    await client.list_tools()
        except BaseException as failure:
            refused = _flow_error(failure)
            if refused is None:
                raise
            await vault.forget()
            raise LoginRefused(REFUSED.format(name=name, reason=" ".join(str(refused).split()))) from None
    finally:
        await pool.close()
    err.print(f"authorized: the tokens for {name!r} are stored (encrypted) in the database; runs refresh them as needed")


def _flow_error(failure: BaseException, depth: int = 0) -> OAuthFlowError | None:
    """The SDK's refusal of the OAuth flow inside `failure` (task groups wrap it in exception
    groups, transports chain it), or None when the failure is something else."""
    from mcp.client.auth import OAuthFlowError

    if isinstance(failure, OAuthFlowError):
        return failure
    if depth > 8:
        return None
    inner = [*getattr(failure, "exceptions", ()), failure.__cause__, failure.__context__]
    return next((found for exc in inner if exc is not None and (found := _flow_error(exc, depth + 1)) is not None), None)
