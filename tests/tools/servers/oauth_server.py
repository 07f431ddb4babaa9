"""A streamable-HTTP MCP server that is its own OAuth 2.1 authorization server (the SDK's
server-side auth helpers): dynamic client registration, an /authorize that approves at once
(redirects straight back with a code), PKCE code exchange, refresh with rotation, and access
tokens that live `TOKEN_LIFETIME_S`. Tool `refreshes` says how many refreshes it granted.
With `--iss`, its metadata advertises `authorization_response_iss_parameter_supported` and the
redirect carries its issuer as `iss` (RFC 9207); with `--wrong-iss`, it advertises the same but
sends another server's issuer (a mix-up).
Usage: oauth_server.py PORT [--iss | --wrong-iss]."""

from __future__ import annotations

import secrets
import sys
import time

from mcp.server import MCPServer
from mcp.server.auth import routes
from mcp.server.auth.provider import AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken, construct_redirect_uri
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"
TOKEN_LIFETIME_S = 600
ISS_MODE = sys.argv[2] if len(sys.argv) > 2 else None
ISSUER = BASE
"""The issuer as the metadata spells it."""

if ISS_MODE is not None:
    built = routes.build_metadata

    def build_metadata_advertising_iss(*args, **kwargs):  # type: ignore[no-untyped-def]
        return built(*args, **kwargs).model_copy(update={"authorization_response_iss_parameter_supported": True})

    routes.build_metadata = build_metadata_advertising_iss


class ApprovesAtOnce:
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.refreshes = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[str(client_info.client_id)] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=str(client.client_id),
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource)
        iss = {"--iss": ISSUER, "--wrong-iss": "https://attacker.example/"}.get(ISS_MODE or "")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=iss)

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(str(client.client_id), authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        del self.refresh[refresh_token.token]
        self.refreshes += 1
        return self._issue(str(client.client_id), scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        return found if found is not None and (found.expires_at or 0) > time.time() else None

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + TOKEN_LIFETIME_S, resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=TOKEN_LIFETIME_S, refresh_token=refresh)


provider = ApprovesAtOnce()
mcp = MCPServer("oauth-protected", version="1.0.0", auth_server_provider=provider,
                auth=AuthSettings(issuer_url=BASE, resource_server_url=f"{BASE}/mcp", required_scopes=[],
                                  client_registration_options=ClientRegistrationOptions(enabled=True)))


@mcp.tool()
def refreshes() -> int:
    """How many times a token was refreshed."""
    return provider.refreshes


if __name__ == "__main__":
    mcp.run("streamable-http", host="127.0.0.1", port=PORT)
