"""Server requests during a tool call, at the bridge: which run they reach, the escalations
budget, sampling only where allowed, and the tools/list_changed flag."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest

from mcp import types

from tests.tools.servers.asking_server import SCHEMA
from boundloop.tools import client_features
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers

ASKING_SERVER = str(Path(__file__).parent / "servers" / "asking_server.py")


@pytest.fixture(scope="module")
async def bridge(log_dir: Path) -> AsyncIterator[MCPBridge]:
    """One asking server (legacy protocol: its requests arrive on the session's receive loop) for the module."""
    servers = load_servers({"mcpServers": {"asking": {"command": sys.executable, "args": [ASKING_SERVER], "protocol": "legacy"}}})
    async with MCPBridge(servers, log_dir=log_dir) as started:
        yield started


def _scope(**fields: Any) -> client_features.CallScope:
    return client_features.CallScope(run_id="r", tool="asking__ask", unattended=False, stops_for_questions=True, **fields)


async def test_a_question_stops_the_call_and_the_stored_answer_is_given_when_it_is_sent_again(bridge: MCPBridge) -> None:
    scope = _scope(escalations_limit=1)
    with client_features.calling(scope):
        stopped = await client_features.until_question(scope, bridge.call("asking", "ask", {}, timeout_s=10))
        assert stopped is None and scope.escalations == 1
        question = scope.question
        assert question is not None and question["message"] == "Which colour, and how many?" and question["schema"]["required"] == ["colour"]
        assert question["key"] == client_features.question_key("asking", question["message"], question["schema"])
        scope.answers[question["key"]] = {"action": "accept", "content": {"colour": "red"}}
        answered = await client_features.until_question(scope, bridge.call("asking", "ask", {}, timeout_s=10))
    assert answered is not None and json.loads(answered.text) == {"action": "accept", "content": {"colour": "red", "count": 2}}
    assert scope.escalations == 1  # the stored answer asked nobody
    assert [event["action"] for event in scope.events] == ["accept"]


async def test_with_no_escalation_left_the_question_is_declined_without_stopping(bridge: MCPBridge) -> None:
    scope = _scope(escalations_used=1, escalations_limit=1)
    with client_features.calling(scope):
        outcome = await client_features.until_question(scope, bridge.call("asking", "ask", {}, timeout_s=10))
    assert outcome is not None and json.loads(outcome.text)["action"] == "decline" and scope.question is None
    assert scope.events[0]["why"] == "no escalations left in budget.escalations"


async def test_a_2025_question_during_several_calls_of_its_session_is_declined(bridge: MCPBridge) -> None:
    """The server does not say which call asked, so no call can be stopped for it."""

    async def ask() -> dict[str, Any]:
        scope = _scope(escalations_limit=None)
        with client_features.calling(scope):
            outcome = await client_features.until_question(scope, bridge.call("asking", "ask", {}, timeout_s=10))
        assert outcome is not None and scope.question is None
        return json.loads(outcome.text)

    answers = await asyncio.wait_for(asyncio.gather(ask(), ask()), timeout=20)
    assert [answer["action"] for answer in answers] == ["decline", "decline"]


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


async def test_a_server_restarted_during_one_call_asks_the_next_call_not_the_one_that_restarted_it(log_dir: Path) -> None:
    """The restart happens inside a call; the new connection outlives it. Its questions must reach
    the call in flight when they are asked, not be answered from (and charged to) the ended one."""
    servers = load_servers({"mcpServers": {"asking": {"command": sys.executable, "args": [ASKING_SERVER], "protocol": "legacy"}}})
    async with MCPBridge(servers, log_dir=log_dir / "restart", max_reconnects=1) as bridge:
        os.kill(bridge.pids()["asking"], signal.SIGKILL)
        ended = client_features.CallScope(run_id="r1", tool="asking__ask", unattended=True)
        with client_features.calling(ended), anyio.fail_after(30):
            while (outcome := await bridge.call("asking", "ask", {}, timeout_s=10)).status != "ok":
                assert outcome.status == "server_unavailable"
        assert json.loads(outcome.text)["action"] == "decline" and bridge.pids()["asking"]  # restarted, inside `ended`
        later = _scope(escalations_limit=1)
        key = client_features.question_key("asking", "Which colour, and how many?", SCHEMA)
        later.answers[key] = {"action": "accept", "content": {"colour": "green"}}
        with client_features.calling(later):
            answered = await client_features.until_question(later, bridge.call("asking", "ask", {}, timeout_s=10))
    assert answered is not None and json.loads(answered.text) == {"action": "accept", "content": {"colour": "green", "count": 2}}
    assert [event["action"] for event in later.events] == ["accept"]
    assert [event["action"] for event in ended.events] == ["decline"]  # its own question only


async def test_a_server_written_the_ordinary_way_asks_samples_and_lists_roots_with_the_default_protocol(log_dir: Path) -> None:
    """No `protocol` in its config: the server's elicitation, sampling and roots requests, sent from
    inside its tool calls as the SDK's examples do, all reach the client."""
    servers = load_servers({"mcpServers": {"asking": {"command": sys.executable, "args": [ASKING_SERVER], "sampling": True}}})
    async with MCPBridge(servers, log_dir=log_dir) as bridge:
        scope = _scope(escalations_limit=1, roots=("/srv/work",), sample=_echo_sampler)
        with client_features.calling(scope):
            asked = await client_features.until_question(scope, bridge.call("asking", "ask", {}, timeout_s=10))
            assert asked is None and scope.question is not None  # the question reached us: the call stopped for it
            roots = await bridge.call("asking", "roots", {}, timeout_s=10)
            sampled = await bridge.call("asking", "summarize", {"text": "the notes"}, timeout_s=10)
    assert roots.ok and json.loads(roots.text) == ["file:///srv/work"], roots.text
    assert sampled.ok and json.loads(sampled.text) == {"model": "echo", "text": "echo: the notes"}, sampled.text


async def _echo_sampler(params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[0].content.text  # type: ignore[union-attr]
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=f"echo: {text}"), model="echo")
