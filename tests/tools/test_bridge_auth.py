"""An HTTP MCP server that wants authorization: its 401 becomes "authorization needed" with the
fix, never the SDK's generic "Server returned an error response"."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx2
import pytest

from tools.bridge import MCPBridge
from tools.config import load_servers
from tools.errors import ServerStartError

PROTECTED_SERVER = str(Path(__file__).parent / "servers" / "protected_server.py")


@pytest.fixture
def protected_url(tmp_path: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "protected.log").open("w")
    process = subprocess.Popen([sys.executable, PROTECTED_SERVER, str(port)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(200):
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        process.kill()
        process.wait(timeout=10)


async def test_a_401_says_authorization_needed_and_a_token_in_headers_gets_in(protected_url: str, log_dir: Path) -> None:
    with pytest.raises(ServerStartError) as refused:
        async with MCPBridge(load_servers({"mcpServers": {"remote": {"url": protected_url}}}), log_dir=log_dir):
            pass
    message = str(refused.value)
    assert "authorization needed: the server answered HTTP 401" in message and "Server returned an error response" not in message
    assert '"Authorization": "Bearer ${REMOTE_TOKEN}"' in message
    servers = load_servers({"mcpServers": {"remote": {"url": protected_url, "headers": {"Authorization": "Bearer good"}}}})
    async with MCPBridge(servers, log_dir=log_dir) as bridge:
        assert (await bridge.call("remote", "hello", {}, timeout_s=10)).text == "hello"
