"""What the MCP conformance suite's server scenarios checked on our shipped servers: a set
`serverInfo.version`, tool descriptions without docstring indentation, and -32602 for `prompts/get`
of an unknown name; and the freshness hint their `tools/list` gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, MCPError
from mcp.server import MCPServer
from mcp.types import INVALID_PARAMS

from boundloop.mcp_servers._shipped import TOOLS_TTL_MS
from boundloop.mcp_servers.sandbox.limits import Limits
from boundloop.mcp_servers.sandbox.server import build_server as build_sandbox
from boundloop.mcp_servers.workspace.server import build_server as build_workspace


def _servers(tmp_path: Path) -> list[MCPServer]:
    return [build_workspace(tmp_path / "workspace"), build_sandbox(tmp_path / "sandbox", Limits())]


async def test_server_info_version_and_descriptions(tmp_path: Path) -> None:
    for server in _servers(tmp_path):
        async with Client(server) as client:
            assert client.server_info.version, f"{client.server_info.name} has an empty serverInfo.version"
            for tool in (await client.list_tools()).tools:
                lines = (tool.description or "").splitlines()
                assert lines and not any(line.startswith(" ") for line in lines), (tool.name, tool.description)


async def test_unknown_prompt_is_invalid_params(tmp_path: Path) -> None:
    for server in _servers(tmp_path):
        async with Client(server) as client:
            with pytest.raises(MCPError) as raised:
                await client.get_prompt("no-such-prompt")
            assert raised.value.code == INVALID_PARAMS


async def test_tools_list_says_the_list_stays_as_it_is_and_it_does(tmp_path: Path) -> None:
    """Each server registers its tools when it is built: its `tools/list` gives MCP's `ttlMs`
    caching hint, which a trusting client may check reads against (tools/fresh_listing.py)."""
    for server in _servers(tmp_path):
        async with Client(server) as client:
            first = await client.list_tools()
            await client.call_tool(first.tools[0].name, {})  # whatever it answers, the list must not change
            second = await client.list_tools()
            assert first.ttl_ms == second.ttl_ms == TOOLS_TTL_MS, client.server_info.name
            assert first.tools == second.tools, client.server_info.name
