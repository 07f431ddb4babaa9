"""An HTTP MCP server that wants authorization: its 401 becomes "authorization needed" with the
fix, never the SDK's generic "Server returned an error response"."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tools.bridge import MCPBridge
from tools.config import load_servers
from tools.errors import ServerStartError

PROTECTED_SERVER = str(Path(__file__).parent / "servers" / "protected_server.py")


async def test_a_401_says_authorization_needed_and_a_token_in_headers_gets_in(serve_http: Callable[[str], str], log_dir: Path) -> None:
    protected_url = serve_http(PROTECTED_SERVER)
    with pytest.raises(ServerStartError) as refused:
        async with MCPBridge(load_servers({"mcpServers": {"remote": {"url": protected_url}}}), log_dir=log_dir):
            pass
    message = str(refused.value)
    assert "authorization needed: the server answered HTTP 401" in message and "Server returned an error response" not in message
    assert '"Authorization": "Bearer ${REMOTE_TOKEN}"' in message
    servers = load_servers({"mcpServers": {"remote": {"url": protected_url, "headers": {"Authorization": "Bearer good"}}}})
    async with MCPBridge(servers, log_dir=log_dir) as bridge:
        assert (await bridge.call("remote", "hello", {}, timeout_s=10)).text == "hello"
