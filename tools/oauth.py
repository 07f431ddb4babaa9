"""oauth: OAuth 2.1 for HTTP MCP servers whose config sets `"oauth": true`, with the SDK's client
auth (`mcp.client.auth.OAuthClientProvider`: discovery, dynamic registration, PKCE, refresh).

Tokens and the registered client are kept per server in our database (`boundloop_mcp_oauth`),
encrypted at rest with Fernet under the key in `BOUNDLOOP_TOKEN_KEY` (the database never sees a
token in clear, and a stolen dump is useless without the key). `boundloop auth SERVER`
(graph/cli/auth.py) is the only place a person logs in; a run never opens a browser: when the
stored tokens are missing and cannot be refreshed, its server fails to start with
"authorization needed: run `boundloop auth SERVER`". The SDK refreshes an expired access token
with the stored refresh token before a request, and the new tokens are stored again.
"""

from __future__ import annotations

import json
import os
import time
from typing import Awaitable, Callable

from cryptography.fernet import Fernet, InvalidToken
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from boundloop.tools.config import ServerConfig
from boundloop.tools.errors import AuthorizationNeeded, ToolsError

KEY_ENV = "BOUNDLOOP_TOKEN_KEY"
NEW_KEY = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
_TABLE = (
    "CREATE TABLE IF NOT EXISTS boundloop_mcp_oauth ("
    " server text PRIMARY KEY, tokens bytea, client bytea, updated_at timestamptz NOT NULL DEFAULT now())"
)
CALLBACK_PATH = "/callback"


def cipher() -> Fernet:
    key = os.environ.get(KEY_ENV)
    if not key:
        raise ToolsError(f"{KEY_ENV} is not set; MCP OAuth tokens are stored encrypted under it. Create one with {NEW_KEY} and export it.")
    try:
        return Fernet(key.encode())
    except ValueError:
        raise ToolsError(f"{KEY_ENV} is not a Fernet key (32 url-safe base64-encoded bytes); create one with {NEW_KEY}.") from None


class TokenVault:
    """The SDK's `TokenStorage` for one server, in our database, encrypted."""

    def __init__(self, pool: AsyncConnectionPool, server: str) -> None:
        self.pool = pool
        self.server = server
        self.cipher = cipher()

    async def _read(self, column: str) -> bytes | None:
        async with self.pool.connection() as conn:
            await conn.execute(_TABLE)
            cursor = conn.cursor(row_factory=tuple_row)
            row = await (await cursor.execute(f"SELECT {column} FROM boundloop_mcp_oauth WHERE server = %s", (self.server,))).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return self.cipher.decrypt(bytes(row[0]))
        except InvalidToken:
            raise ToolsError(f"the stored OAuth {column} of MCP server {self.server!r} do not decrypt with {KEY_ENV} "
                             f"(the key changed?); run `boundloop auth {self.server}` again") from None

    async def _write(self, column: str, value: bytes) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(_TABLE)
            await conn.execute(
                f"INSERT INTO boundloop_mcp_oauth (server, {column}) VALUES (%s, %s) "
                f"ON CONFLICT (server) DO UPDATE SET {column} = excluded.{column}, updated_at = now()",
                (self.server, self.cipher.encrypt(value)),
            )

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, `expires_in` counted from now (so a new process knows when to refresh)."""
        raw = await self._read("tokens")
        if raw is None:
            return None
        stored = json.loads(raw)
        tokens = OAuthToken.model_validate(stored["tokens"])
        if stored.get("expires_at") is None:
            return tokens
        return tokens.model_copy(update={"expires_in": max(int(stored["expires_at"] - time.time()), 0)})

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        await self._write("tokens", json.dumps({"tokens": tokens.model_dump(mode="json"), "expires_at": expires_at}).encode())

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = await self._read("client")
        return None if raw is None else OAuthClientInformationFull.model_validate_json(raw)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._write("client", client_info.model_dump_json().encode())

    async def forget(self) -> None:
        """Drop the server's tokens and registered client (a new login registers again)."""
        async with self.pool.connection() as conn:
            await conn.execute(_TABLE)
            await conn.execute("DELETE FROM boundloop_mcp_oauth WHERE server = %s", (self.server,))


def client_metadata(redirect_uri: str) -> OAuthClientMetadata:
    return OAuthClientMetadata(client_name="boundloop", redirect_uris=[redirect_uri], grant_types=["authorization_code", "refresh_token"],
                               response_types=["code"], token_endpoint_auth_method="none")


def logins(pool: AsyncConnectionPool) -> Callable[[ServerConfig], OAuthClientProvider]:
    """The bridge's `auth` factory for a run: each `oauth` server logs in with its stored tokens."""
    return lambda config: provider(str(config.url), TokenVault(pool, config.name))


def provider(
    url: str,
    vault: TokenVault,
    *,
    redirect_uri: str = f"http://127.0.0.1{CALLBACK_PATH}",
    redirect_handler: Callable[[str], Awaitable[None]] | None = None,
    callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
) -> OAuthClientProvider:
    """The httpx auth for one server. Without handlers (a run), needing a login raises `AuthorizationNeeded`."""

    async def refuse_redirect(_: str) -> None:
        raise AuthorizationNeeded(vault.server)

    async def refuse_callback() -> AuthorizationCodeResult:
        raise AuthorizationNeeded(vault.server)

    return _Provider(url, client_metadata(redirect_uri), vault, redirect_handler=redirect_handler or refuse_redirect,
                               callback_handler=callback_handler or refuse_callback)


class _Provider(OAuthClientProvider):
    """The SDK's provider, which also takes the stored tokens' expiry when it loads them, so an
    expired access token is refreshed before a request instead of being sent and refused (the SDK
    answers a 401 with a full login, which a run cannot do)."""

    async def _initialize(self) -> None:
        await super()._initialize()
        if self.context.current_tokens is not None:
            self.context.update_token_expiry(self.context.current_tokens)
