"""http_auth: notice when an HTTP MCP server refuses us for lack of authorization.

The SDK turns a 401 or 403 answer into the same "Server returned an error response" as any
other non-2xx status; an httpx event hook on the connection's client keeps the status and the
`WWW-Authenticate` challenge so the bridge can say "authorization needed" instead.
"""

from __future__ import annotations

import httpx2

AUTHORIZATION_NEEDED = (
    "authorization needed: the server answered HTTP {status}{challenge}"
)
FIX = ("set \"oauth\": true in the server's config and log in with `boundloop auth {server}` if it supports OAuth; "
       "or put a token in its headers, e.g. \"headers\": {{\"Authorization\": \"Bearer ${{{env}}}\"}}, and export {env}")


class AuthRefusals:
    """The last 401/403 answer of one server's endpoint, cleared by the next success."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.last: tuple[int, str] | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            self.last = (response.status_code, response.headers.get("www-authenticate", ""))
        elif response.is_success:
            self.last = None

    def cause(self) -> str | None:
        """One line saying the server wants authorization, or None when it did not refuse us."""
        if self.last is None:
            return None
        status, challenge = self.last
        return AUTHORIZATION_NEEDED.format(status=status, challenge=f" ({challenge})" if challenge else "")

    def fix(self) -> str:
        return FIX.format(server=self.server, env=f"{self.server.upper().replace('-', '_')}_TOKEN")
