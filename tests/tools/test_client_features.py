"""Server requests during a tool call, at the bridge: which run they reach, the escalations
budget, sampling only where allowed, and the tools/list_changed flag."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from tools import client_features
from tools.bridge import MCPBridge
from tools.config import load_servers

ASKING_SERVER = str(Path(__file__).parent / "servers" / "asking_server.py")


@pytest.fixture(scope="module")
async def bridge(log_dir: Path) -> AsyncIterator[MCPBridge]:
    """One asking server (legacy protocol: its requests arrive on the session's receive loop) for the module."""
    servers = load_servers({"mcpServers": {"asking": {"command": sys.executable, "args": [ASKING_SERVER], "protocol": "legacy"}}})
    async with MCPBridge(servers, log_dir=log_dir) as started:
        yield started


async def test_questions_stop_at_the_escalations_budget_shared_by_calls_sent_together(bridge: MCPBridge) -> None:
    asked: list[str] = []

    async def human(question: dict[str, Any]) -> dict[str, Any]:
        asked.append(question["tool"])
        return {"action": "accept", "content": {"colour": "red", "count": 5}}

    async def ask() -> dict[str, Any]:
        scope = client_features.CallScope(run_id="r", tool="asking__ask", unattended=False, escalations_used=1,
                                          escalations_limit=2, human=human)
        with client_features.calling(scope):
            return json.loads((await bridge.call("asking", "ask", {}, timeout_s=10)).text)

    answers = await asyncio.gather(ask(), ask())
    assert len(asked) == 1  # one question left in the budget, whichever call got it
    assert sorted(answer["action"] for answer in answers) == ["accept", "decline"]
    assert {"colour": "red", "count": 5} in [answer["content"] for answer in answers]


async def test_without_a_run_the_server_is_declined_and_sampling_is_not_offered(bridge: MCPBridge) -> None:
    asked = await bridge.call("asking", "ask", {}, timeout_s=10)  # no scope: no run to answer for
    assert json.loads(asked.text)["action"] == "decline"
    scope = client_features.CallScope(run_id="r", tool="asking__summarize", unattended=False)
    with client_features.calling(scope):
        sampled = await bridge.call("asking", "summarize", {"text": "t"}, timeout_s=10)
    assert sampled.status == "tool_error" and "MCP error" in sampled.text
    assert scope.escalations == 0


async def test_tools_list_changed_sets_the_flag_and_calls_back(bridge: MCPBridge) -> None:
    features = bridge.features("asking")
    heard: list[str] = []
    features.on_tools_changed.append(lambda: heard.append("changed"))
    assert not features.tools_changed.is_set()
    await bridge.call("asking", "grow", {}, timeout_s=10)
    await asyncio.wait_for(features.tools_changed.wait(), 5)
    assert heard == ["changed"]
