"""A streamable-HTTP MCP server behind the SDK's bearer-token middleware: `Authorization:
Bearer good` is let in, anything else gets HTTP 401 with a `WWW-Authenticate` challenge.
Usage: protected_server.py PORT."""

from __future__ import annotations

import sys

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

PORT = int(sys.argv[1])
URL = f"http://127.0.0.1:{PORT}/mcp"


class OneToken:
    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id="test", scopes=[]) if token == "good" else None


mcp = MCPServer("protected", version="1.0.0", token_verifier=OneToken(),
                auth=AuthSettings(issuer_url="http://127.0.0.1:9/", resource_server_url=URL, required_scopes=[]))


@mcp.tool()
def hello() -> str:
    """Say hello."""
    return "hello"


if __name__ == "__main__":
    mcp.run("streamable-http", host="127.0.0.1", port=PORT)
