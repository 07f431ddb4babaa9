"""services: the live resources a run needs that cannot live in checkpointed state.

One MCP bridge per run (one session per server, reused across the run's calls, started on first
use and closed when the process stops driving the run: it ended, waits for a human, was cancelled
or failed; servers marked `shared`, such as the default workspace server, are shared by the runs
of the process instead: tools/shared_sessions.py), one connection pool for our own tables, and the run leases. `driving(run_id)` is the
one place a drive begins and ends, for the Runner and for the server (`boundloop.graph.server`). Nodes reach
these through the `Services` the graph was built with; the server uses `default_services()`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

from langgraph.config import get_config
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import approvals, tool_listings
from boundloop.checkpoints.lease import LeaseHolder
from boundloop.graph.core.capacity import MAX_ACTIVE_RUNS
from boundloop.graph.core.records import ListingDecision
from boundloop.graph.core.stops import Stops
from boundloop.tools import kept_listing, pinning, secrets
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import ServerConfig, load_servers
from boundloop.tools.errors import ConfigError
from boundloop.tools.registry import ToolRegistry
from boundloop.tools.sandbox_hiding import hiding_denied
from boundloop.tools.shared_sessions import SharedSessions


def current_run_id() -> str:
    """The thread id of the run being executed (a run is a thread)."""
    return get_config()["configurable"]["thread_id"]


def default_servers(workspace_root: str) -> dict[str, Any]:
    """The shipped workspace server, confined to `workspace_root`, run with this interpreter."""
    return {
        "mcpServers": {
            "workspace": {
                "command": sys.executable,
                "args": ["-m", "boundloop.mcp_servers.workspace", "--root", workspace_root],
                "trusted": True,
                "protocol": "auto",  # ours speaks 2026-07-28: its tool list says how long it stands
                "shared": True,  # stateless per call, confined to its --root: one process per root
            }
        }
    }


KEEP_AGAIN_S = 3600.0
"""How often a long-lived process writes again the listing it keeps for its servers, so that it stays
young enough to be pinned (tools/kept_listing.MAX_AGE_S)."""

class Services:
    """Per-process resources, keyed by run where they are per run."""

    def __init__(
        self, *, database_url: str | None = None, pool: AsyncConnectionPool | None = None, max_active_runs: int = MAX_ACTIVE_RUNS,
        share_servers: bool = True,
    ) -> None:
        self._database_url = database_url
        self._pool = pool
        self._owns_pool = pool is None
        self._pool_lock = asyncio.Lock()
        self._leases: LeaseHolder | None = None
        self._slots = asyncio.Semaphore(max_active_runs)
        self._bridges: dict[str, MCPBridge] = {}
        self.shared_sessions = SharedSessions()
        self._share_servers = share_servers
        """False: every run gets its own session of every server, `shared` or not (the server path:
        a waiting or finished thread holds no server there)."""
        self._bridge_locks: dict[str, asyncio.Lock] = {}
        self._bridge_keys: dict[str, str] = {}
        """Per run, the settings its bridge was started for."""
        self._warmups: dict[str, asyncio.Task[None]] = {}
        """Per run, its servers' start in the background (`warm`), until it is done."""
        self._failed_warmups: dict[str, tuple[str, Exception]] = {}
        self._kept: dict[str, tuple[str, float]] = {}
        """Per kept-listing key, the version this process last kept and when (monotonic seconds)."""
        self._registries: dict[str, tuple[str, ToolRegistry]] = {}
        """Per run, the registry built from its pins, with their version."""
        self._write_locks: dict[str, asyncio.Lock] = {}
        self._secrets_known: set[str] = set()
        """The servers configs (a file's path, or inline JSON) whose secrets this process remembers."""
        self._drives: dict[str, tuple[asyncio.Lock, int]] = {}
        self._asked: dict[str, bool] = {}
        """Per run driven here: whether a server's question was recorded for it when its drive began."""
        self.stops = Stops()
        """Where a drive the Runner cancels may stop (graph/core/stops.py); every node passes through it."""
        self.graph_version = ""
        """Hash of the compiled graph's nodes and edges (boundloop.graph.trace.record.graph_version), set by build_graph."""

    @asynccontextmanager
    async def driving(self, run_id: str, *, on_error: Callable[[BaseException], Awaitable[None]] | None = None) -> AsyncIterator[None]:
        """Drive one run: wait for a slot, hold its lease (`RunActiveElsewhere` if another
        process drives it; a drive in this process is waited for, cleanup included), and release
        its tool servers when the drive stops, however it stops.

        `on_error` runs, still under the lease, when the drive ends with an exception (the
        server halts a cancelled run there).
        """
        async with self._one_drive_at_a_time(run_id), self._slots:
            leases = await self._lease_holder()
            try:
                async with leases.lease(run_id):
                    self._asked[run_id] = await approvals.questions_asked(await self.pool(), run_id)  # read under the lease
                    try:
                        yield
                    except BaseException as error:
                        if on_error is not None:
                            await asyncio.shield(on_error(error))
                        raise
            finally:
                self._asked.pop(run_id, None)
                await asyncio.shield(self.close_run(run_id))  # a cancelled drive still reaps its servers

    def questions_may_be_recorded(self, run_id: str) -> bool:
        """Whether a call of the run may find a server's question recorded by an earlier attempt
        (graph/calls/elicitation.py): False only while this process drives the run and no question was
        recorded for it, before the drive began or during it. Only the lease holder records
        questions, so then a call need not ask the database first; a run driven without a lease
        (the graph called directly) always asks."""
        return self._asked.get(run_id, True)

    def question_recorded(self, run_id: str) -> None:
        """A question was recorded for the run in this drive: every later call of the drive asks."""
        if run_id in self._asked:
            self._asked[run_id] = True

    @asynccontextmanager
    async def _one_drive_at_a_time(self, run_id: str) -> AsyncIterator[None]:
        """A cancelled server run cleans up after the server reported it cancelled; a resume
        arriving meanwhile waits for that instead of being refused its own lease."""
        lock, users = self._drives.get(run_id, (asyncio.Lock(), 0))
        self._drives[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._drives[run_id]
            if users == 1:
                del self._drives[run_id]
            else:
                self._drives[run_id] = (lock, users - 1)

    async def bridge(self, run_id: str, settings: dict[str, Any]) -> MCPBridge:
        """The run's bridge, started on first use (also after a resume, in any process), or the one
        `warm` started for these very settings (its failure, if it failed, is raised here once)."""
        async with self._bridge_locks.setdefault(run_id, asyncio.Lock()):
            key = json.dumps(settings, sort_keys=True, default=str)
            if self._bridge_keys.get(run_id, key) != key:  # warmed for other settings: not this run's servers
                await self._bridges.pop(run_id).close()
            if (failed := self._failed_warmups.pop(run_id, None)) is not None and failed[0] == key:
                raise failed[1]
            bridge = self._bridges.get(run_id)
            if bridge is None:
                configs = await self._server_configs(settings)
                auth = None
                if any(config.oauth for config in configs.values()):
                    from boundloop.tools import oauth  # cryptography and the SDK's OAuth client: only for servers that log in

                    auth = oauth.logins(await self.pool())
                bridge = await asyncio.to_thread(lambda: MCPBridge(configs, auth=auth, shared=self.shared_sessions if self._share_servers else None))
                await bridge.start()
                self._bridges[run_id] = bridge
                self._bridge_keys[run_id] = key
            return bridge

    @staticmethod
    async def _server_configs(settings: dict[str, Any]) -> dict[str, ServerConfig]:
        # Off the event loop: the bridge reads the cwd, and the config may be a file, which `langgraph dev` forbids on the loop.
        # Sandbox servers start with the policy's denied paths hidden from their children.
        return await asyncio.to_thread(lambda: hiding_denied(load_servers(servers_config(settings)), settings))

    async def tool_pins(self, run_id: str, settings: dict[str, Any], *, may_keep: bool) -> tuple[dict[str, Any], ListingDecision]:
        """The pins intake writes, and where they came from (tools/kept_listing.py).
        `may_keep`: the run's first model request needs no live server, so a kept listing of these
        servers is pinned and the servers start in the background; else they are started and listed now."""
        key = kept_listing.servers_key(await self._server_configs(settings))
        reason = kept_listing.LISTED_FOR_FIRST_REQUEST if not may_keep else kept_listing.LISTED_UNTRUSTED if key is None else kept_listing.LISTED_NONE_KEPT
        if may_keep and key is not None:
            kept = await tool_listings.kept_pins(await self.pool(), key, max_age_s=kept_listing.MAX_AGE_S)
            if kept_listing.usable(kept):
                self.warm(run_id, settings)
                return cast(dict[str, Any], kept), {"kept": True, "reason": kept_listing.KEPT}
            self._kept.pop(key, None)  # damaged or gone: written again below
        pins = pinning.pin((await self.bridge(run_id, settings)).specs())
        if key is not None:
            await self._keep(key, pins)
        return pins, {"kept": False, "reason": reason}

    async def _keep(self, key: str, pins: dict[str, Any]) -> None:
        """Keep `pins` for the next run on these servers: written when this process has not kept this
        very listing under `key` within the hour (runs at once on the same servers do not all write one row)."""
        kept = self._kept.get(key)
        if kept is None or kept[0] != pins["version"] or time.monotonic() - kept[1] > KEEP_AGAIN_S:
            self._kept[key] = (pins["version"], time.monotonic())
            await tool_listings.keep_pins(await self.pool(), key, pins)

    async def live_pins(self, run_id: str, settings: dict[str, Any], kept: dict[str, Any]) -> dict[str, Any]:
        """The run's servers' pins as they list their tools now (started, or awaited if starting),
        kept again for the next run when they differ from `kept`. A server's start failure is raised."""
        pins = pinning.pin((await self.bridge(run_id, settings)).specs())
        if not pinning.same_tools(pins, kept) and (key := kept_listing.servers_key(await self._server_configs(settings))) is not None:
            self._kept.pop(key, None)
            await self._keep(key, pins)
        return pins

    def warm(self, run_id: str, settings: dict[str, Any]) -> None:
        """Start the run's tool servers now, in the background, so that they come up while the
        process does other work (opening the database, building the graph) instead of after it:
        intake then finds them started. A failure is kept for intake to report, not retried."""
        key = json.dumps(settings, sort_keys=True, default=str)

        async def start() -> None:
            try:
                await self.bridge(run_id, settings)
            except Exception as error:
                self._failed_warmups[run_id] = (key, error)

        if run_id in self._warmups:
            return
        task = self._warmups[run_id] = asyncio.create_task(start())
        task.add_done_callback(lambda _: self._warmups.pop(run_id, None))

    async def know_secrets(self, settings: dict[str, Any]) -> None:
        """Remember the run's configured server secrets in this process (tools/secrets.py) without
        starting its servers: a run resumed here may answer before any server starts, and its answer
        must be masked before it is stored. A config that cannot be read is left to the bridge to report."""
        source = settings.get("servers")
        if not source:
            return
        key = source if isinstance(source, str) else json.dumps(source, sort_keys=True, default=str)
        if key in self._secrets_known:
            return
        try:
            configs = await asyncio.to_thread(load_servers, source)
        except ConfigError:
            return
        self._secrets_known.add(key)
        secrets.remember(value for config in configs.values() for value in config.secret_values())

    def write_lock(self, run_id: str) -> asyncio.Lock:
        """Side-effecting calls of one run go one at a time (approved calls may arrive together)."""
        return self._write_locks.setdefault(run_id, asyncio.Lock())

    async def registry(self, run_id: str, settings: dict[str, Any], pinned: dict[str, Any] | None = None) -> ToolRegistry:
        """The run's tools: the definitions pinned at intake (the state's `tools`; no server is started
        for them), or, without pins (intake itself, runs from before pinning), as the servers list them."""
        if pinned:
            # Pins are written once at intake and their version hashes them all: a run's registry is
            # built once per process, not at every step. Unpinned listings are live and never cached.
            built = self._registries.get(run_id)
            if built is None or built[0] != pinned["version"]:
                built = self._registries[run_id] = (pinned["version"], pinning.registry_of(pinned))
            return built[1]
        return ToolRegistry((await self.bridge(run_id, settings)).specs())

    async def close_run(self, run_id: str) -> None:
        """Stop the run's tool servers (a later step of the run starts them again), a start in the
        background included: it is cancelled, and leaves no server behind."""
        if (warming := self._warmups.get(run_id)) is not None:
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
        self._failed_warmups.pop(run_id, None)
        async with self._bridge_locks.setdefault(run_id, asyncio.Lock()):
            bridge = self._bridges.pop(run_id, None)
            self._bridge_keys.pop(run_id, None)
            if bridge is not None:
                await bridge.close()
        self._bridge_locks.pop(run_id, None)
        self._write_locks.pop(run_id, None)
        self._registries.pop(run_id, None)

    async def pool(self) -> AsyncConnectionPool:
        """The pool for our own tables, opened (and the schema migrated) on first use."""
        async with self._pool_lock:
            if self._pool is None:
                from boundloop.checkpoints.pool import database_url, open_pool
                from boundloop.checkpoints.schema import migrate

                # database_url may start the embedded cluster (subprocesses, file locks): off the loop.
                url = self._database_url
                if not url:
                    url = await asyncio.to_thread(database_url)
                self._pool = await open_pool(url)
                await migrate(self._pool)
            return self._pool

    async def _lease_holder(self) -> LeaseHolder:
        if self._leases is None:
            self._leases = LeaseHolder(cast(str, (await self.pool()).conninfo))  # our pools open on a URL, never a conninfo callable
        return self._leases

    async def aclose(self) -> None:
        for task in list(self._warmups.values()):
            task.cancel()
        await asyncio.gather(*self._warmups.values(), return_exceptions=True)
        for run_id in list(self._bridges):
            await self.close_run(run_id)
        await self.shared_sessions.aclose()
        if self._leases is not None:
            await self._leases.aclose()
            self._leases = None
        if self._pool is not None and self._owns_pool:
            await self._pool.close()
            self._pool = None


def servers_config(settings: dict[str, Any]) -> dict[str, Any] | str:
    """The run's `mcpServers` config: inline, the path of a servers file, or the default workspace server."""
    if settings.get("servers"):
        return settings["servers"]
    root = settings.get("workspace_root")
    if not root:
        from boundloop.graph.core.errors import ConfigError

        raise ConfigError("no MCP servers configured and no workspace root: pass --workspace DIR or --servers FILE")
    return default_servers(root)


_DEFAULT: Services | None = None


def default_services() -> Services:
    """The process-wide services of the graph served by `langgraph dev`."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Services(share_servers=False)
    return _DEFAULT
