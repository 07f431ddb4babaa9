"""The peer of tests/benchmarks/peer.py: LangChain's `create_agent`, bare or with the three
middlewares of its closest "bounded and permissioned" configuration, on our saver and our
workspace server's `read_file` (one MCP session for the process, as a create_agent user has).

Needs the `bench` extra: `.venv/bin/pip install -e '.[bench]'`.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool

from tests.benchmarks.loop import read
from boundloop.tools.bridge import MCPBridge

PEERS = ("bare", "middlewares")
LIMIT = 1_000_000


class LoopModel(BaseChatModel):
    """Zero-latency: one `read_file` call per turn until `iterations` turns, then the answer.
    `crash_at`: raise at that turn instead (a crash, for the resume benchmark)."""

    iterations: int
    crash_at: int | None = None

    @property
    def _llm_type(self) -> str:
        return "bench-loop"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "LoopModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        turns = sum(isinstance(message, AIMessage) for message in messages)
        if turns == self.crash_at:
            raise RuntimeError("bench: simulated crash")
        if turns >= self.iterations:
            message = AIMessage("done")
        else:
            message = AIMessage("", tool_calls=[{"name": "read_file", "args": read(turns), "id": f"c{turns}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return self._generate(messages)


def read_file_tool(bridge: MCPBridge) -> StructuredTool:
    async def read_file(path: str, max_chars: int = 1000) -> str:
        """Read a file of the workspace."""
        return (await bridge.call("workspace", "read_file", {"path": path, "max_chars": max_chars}, timeout_s=10)).text

    return StructuredTool.from_function(coroutine=read_file, name="read_file")


def peer_agent(kind: str, bridge: MCPBridge, saver: Any, iterations: int, crash_at: int | None = None) -> Any:
    middleware = []
    if kind == "middlewares":  # read_file is auto-approved, as boundloop auto-approves reads
        middleware = [HumanInTheLoopMiddleware(interrupt_on={"read_file": False}),
                      ModelCallLimitMiddleware(run_limit=LIMIT), ToolCallLimitMiddleware(run_limit=LIMIT)]
    model = LoopModel(iterations=iterations, crash_at=crash_at)
    return create_agent(model, [read_file_tool(bridge)], middleware=middleware, checkpointer=saver)


def peer_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": LIMIT}


PROMPT = {"messages": [("user", "read the notes")]}
