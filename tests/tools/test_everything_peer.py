"""The bridge against a third-party Node MCP server from npm (server-everything, installed by tests/run.sh)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from boundloop.tools import policy
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry

EVERYTHING = Path(__file__).parents[1] / ".peers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"

pytestmark = pytest.mark.skipif(not EVERYTHING.exists() or shutil.which("node") is None,
                                reason="server-everything is not installed (tests/run.sh installs it when npm is available)")


def _servers(trusted: bool) -> dict:
    return load_servers({"mcpServers": {"everything": {"command": shutil.which("node"), "args": [str(EVERYTHING), "stdio"], "trusted": trusted}}})


async def test_a_node_server_lists_annotated_tools_and_answers_a_call(tmp_path):
    async with MCPBridge(_servers(trusted=True), log_dir=tmp_path) as bridge:
        registry = ToolRegistry(bridge.specs())
        echo = registry.get("everything__echo")
        assert echo is not None and echo.hints.read_only and not echo.hints.open_world
        outcome = await bridge.call("everything", "echo", {"message": "hi from boundloop"}, timeout_s=10)
    assert outcome.ok and "hi from boundloop" in outcome.text


async def test_its_annotations_decide_only_when_the_server_is_trusted(tmp_path):
    """A read-only claim allows a call from a trusted server; from an untrusted one it still asks."""
    for trusted, expected in ((True, ("allow", "default:read_only")), (False, ("ask", "default:untrusted"))):
        async with MCPBridge(_servers(trusted=trusted), log_dir=tmp_path) as bridge:
            echo = ToolRegistry(bridge.specs()).get("everything__echo")
        decision = policy.decide(policy.Policy(), echo, {"message": "x"})
        assert (decision.action, decision.rule_id) == expected
