"""The peer's resume, in a fresh process (tests/benchmarks/peer.py `resume`): what a create_agent
user's program does after a crash. Imports, pool, saver, its MCP server, then `ainvoke(None)`.

    python -m tests.benchmarks.peer_resume DATABASE_URL THREAD_ID WORKSPACE_ROOT HISTORY
"""

from __future__ import annotations

import asyncio
import sys

from boundloop.checkpoints.pool import open_pool
from boundloop.checkpoints.saver import postgres_saver
from boundloop.graph.services import default_servers
from tests.benchmarks.peer_agent import peer_agent, peer_config
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers


async def main(url: str, thread_id: str, root: str, history: int) -> None:
    pool = await open_pool(url)
    try:
        async with postgres_saver(pool) as saver, MCPBridge(load_servers(default_servers(root))) as bridge:
            await peer_agent("bare", bridge, saver, history).ainvoke(None, peer_config(thread_id), durability="sync")
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
