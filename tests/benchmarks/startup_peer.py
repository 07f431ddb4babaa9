"""LangChain's create_agent run once from a fresh process: the peer of the start-up benchmark.

    python -m tests.benchmarks.startup_peer BASE_URL DATABASE_URL SERVERS_FILE WORKSPACE

What a create_agent user writes for the same job: an OpenAI-compatible chat model, the workspace
MCP server's read_file over stdio (through the same client boundloop uses, so the server and its
start are the same for both), a Postgres checkpointer, one invoke. Prints the agent's last message.
"""

from __future__ import annotations

import asyncio
import sys
import uuid


async def main(base_url: str, database_url: str, servers: str, workspace: str) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from boundloop.tools.bridge import MCPBridge
    from boundloop.tools.config import load_servers

    async with MCPBridge(load_servers(servers)) as bridge, AsyncPostgresSaver.from_conn_string(database_url) as saver:
        await saver.setup()

        async def read_file(path: str) -> str:
            """Read a file of the workspace."""
            return (await bridge.call("workspace", "read_file", {"path": path}, timeout_s=30)).text

        model = ChatOpenAI(model="bench-startup", base_url=base_url, api_key="sk-bench-startup")
        agent = create_agent(model, [StructuredTool.from_function(coroutine=read_file, name="workspace__read_file")],
                             system_prompt=f"You carry out a plan in the workspace {workspace}.", checkpointer=saver)
        final = await agent.ainvoke({"messages": [("user", "Summarize notes.md")]}, {"configurable": {"thread_id": f"startup-{uuid.uuid4().hex[:10]}"}})
        print(final["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
