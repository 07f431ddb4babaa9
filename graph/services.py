"""services: the live resources a run needs that cannot live in checkpointed state.

One MCP bridge per run (one session per server, reused across the run's calls, closed when the
run finalizes or the process ends) and one connection pool for our own tables. Nodes reach them
through the `Services` the graph was built with; the server-exported graph uses `default_services()`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langgraph.config import get_config
from psycopg_pool import AsyncConnectionPool

from tools import pinning
from tools.bridge import MCPBridge
from tools.config import load_servers
from tools.registry import ToolRegistry


def current_run_id() -> str:
    """The thread id of the run being executed (a run is a thread)."""
    return get_config()["configurable"]["thread_id"]


def default_servers(workspace_root: str) -> dict[str, Any]:
    """The shipped workspace server, confined to `workspace_root`, run with this interpreter."""
    return {
        "mcpServers": {
            "workspace": {
                "command": sys.executable,
                "args": ["-m", "mcp_servers.workspace", "--root", workspace_root],
                "trusted": True,
            }
        }
    }


class Services:
    """Per-process resources, keyed by run where they are per run."""

    def __init__(self, *, database_url: str | None = None, pool: AsyncConnectionPool | None = None) -> None:
        self._database_url = database_url
        self._pool = pool
        self._owns_pool = pool is None
        self._bridges: dict[str, MCPBridge] = {}
        self._lock = asyncio.Lock()
        self._write_locks: dict[str, asyncio.Lock] = {}

    async def bridge(self, run_id: str, settings: dict[str, Any]) -> MCPBridge:
        """The run's bridge, started on first use (also after a resume in a new process)."""
        async with self._lock:
            bridge = self._bridges.get(run_id)
            if bridge is None:
                # Off the event loop: the bridge reads the cwd, and the config may be a file, which `langgraph dev` forbids on the loop.
                bridge = await asyncio.to_thread(lambda: MCPBridge(load_servers(servers_config(settings))))
                await bridge.start()
                self._bridges[run_id] = bridge
            return bridge

    def write_lock(self, run_id: str) -> asyncio.Lock:
        """Side-effecting calls of one run go one at a time (approved calls may arrive together)."""
        return self._write_locks.setdefault(run_id, asyncio.Lock())

    async def registry(self, run_id: str, settings: dict[str, Any], pinned: dict[str, Any] | None = None) -> ToolRegistry:
        """The run's tools: the definitions pinned at intake (the state's `tools`; no server is started
        for them), or, without pins (intake itself, runs from before pinning), as the servers list them."""
        if pinned:
            return pinning.registry_of(pinned)
        return ToolRegistry((await self.bridge(run_id, settings)).specs())

    async def close_run(self, run_id: str) -> None:
        bridge = self._bridges.pop(run_id, None)
        if bridge is not None:
            await bridge.close()

    async def pool(self) -> AsyncConnectionPool:
        """The pool for our own tables, opened (and the schema migrated) on first use."""
        if self._pool is None:
            from checkpoints.pool import database_url, open_pool
            from checkpoints.schema import migrate

            self._pool = await open_pool(self._database_url or database_url())
            await migrate(self._pool)
        return self._pool

    async def aclose(self) -> None:
        for run_id in list(self._bridges):
            await self.close_run(run_id)
        if self._pool is not None and self._owns_pool:
            await self._pool.close()
            self._pool = None


def servers_config(settings: dict[str, Any]) -> dict[str, Any] | str:
    """The run's `mcpServers` config: inline, the path of a servers file, or the default workspace server."""
    if settings.get("servers"):
        return settings["servers"]
    root = settings.get("workspace_root")
    if not root:
        from graph.errors import ConfigError

        raise ConfigError("no MCP servers configured and no workspace root: pass --workspace DIR or --servers FILE")
    return default_servers(root)


_DEFAULT: Services | None = None


def default_services() -> Services:
    """The process-wide services of the graph served by `langgraph dev`."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Services()
    return _DEFAULT
