"""The client the official MCP conformance suite drives (`conformance client --command ...`):
boundloop's own MCP bridge, connecting to the scenario's server URL (the last argument), calling
each tool it lists once, and accepting every elicitation with the schema's defaults — what an
attended run's human does when they accept without typing anything. The answer is given the way a
resumed run gives a stored one (tools/client_features.py): the suite checks each response it gets,
so the first send must not be stopped and cancelled for the question."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp.shared.auth import AuthorizationCodeResult

from boundloop.tools import client_features, oauth
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import ServerConfig, load_servers

SAMPLE_VALUES = {"number": 1, "integer": 1, "string": "x", "boolean": True}


def arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for each required argument, by type."""
    properties = schema.get("properties") or {}
    return {name: SAMPLE_VALUES.get(properties.get(name, {}).get("type"), "x") for name in schema.get("required") or []}


class AcceptEverything(dict[str, Any]):
    """Stored answers that accept any question with no field typed (the schema's defaults fill them)."""

    def get(self, key: str, default: Any = None) -> dict[str, Any]:
        return {"action": "accept", "content": {}}


class MemoryVault:
    """Token storage for one conformance run (the real one is tools/oauth.TokenVault, in the database)."""

    def __init__(self) -> None:
        self.server = "peer"
        self.tokens: Any = None
        self.client: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client: Any) -> None:
        self.client = client


def browser_login(config: ServerConfig) -> Any:
    """The OAuth login with a "browser" that follows the authorization URL to its redirect (the
    suite's authorization servers approve at once), as `boundloop auth` does with a person."""
    codes: asyncio.Queue[AuthorizationCodeResult] = asyncio.Queue()

    async def open_url(url: str) -> None:
        async with httpx2.AsyncClient() as http:
            response = await http.get(url, follow_redirects=False)
        query = parse_qs(urlparse(response.headers["location"]).query)
        await codes.put(AuthorizationCodeResult(code=query["code"][0], state=(query.get("state") or [None])[0]))

    return oauth.provider(str(config.url), MemoryVault(), redirect_uri=f"http://127.0.0.1:1{oauth.CALLBACK_PATH}",  # type: ignore[arg-type]
                          redirect_handler=open_url, callback_handler=codes.get)


async def main(url: str) -> None:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    servers = load_servers({"mcpServers": {"peer": {"url": url, "oauth": scenario.startswith("auth/")}}})
    async with MCPBridge(servers, log_dir=Path(tempfile.mkdtemp()), auth=browser_login) as bridge:
        for spec in bridge.specs():
            scope = client_features.CallScope(run_id="conformance", tool=spec.qualified_name, unattended=False,
                                              escalations_limit=None, answers=AcceptEverything())
            with client_features.calling(scope):
                outcome = await bridge.call("peer", spec.name, arguments(spec.input_schema), timeout_s=20)
            print(f"{spec.name}: {outcome.status} {outcome.text[:200]}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))
