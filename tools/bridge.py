"""bridge: one long-lived MCP client per configured server, callable from any asyncio task.

Owns connecting (stdio spawn or streamable HTTP), the handshake and its legacy fallback, listing
each server's tools as `ToolSpec`s, turning every call into exactly one `CallOutcome`, and making
sure no server process outlives the bridge. Never decides whether a call may run (policy.py),
never retries (dispatch.py), never shortens a result (dispatch.bound_text).

Each server's client lives in a `Connection` (tools/connection.py: why an owner task per server,
and how a dead connection is reconnected).

The per-call timeout is the server's `timeout_s` when its config sets one (bounded by the step's
deadline, graph/core/deadline.py), else the caller's.

Every wait is bounded: the handshake by `startup_timeout_s`, a call by its `timeout_s` (the SDK
sends `notifications/cancelled` when it fires, on its own timeout or on ours), `close()` by
`close_timeout_s`, after which whatever is left of a server's process group is SIGKILLed.
Stdio servers also exit on stdin EOF, so a crash of our own process leaves none behind.
Each stdio server's stderr goes to `<log_dir>/<server>.<bridge id>.stderr.log`, not our terminal.
What the bridge returns or logs (results, start errors with their stderr excerpt, log lines) has
the servers' secrets masked (tools/secrets.py). `current_specs()` re-lists a server's tools for the
check before a call (tools/pinning.py), unless a trusted server's last listing still stands
(tools/fresh_listing.py) and the call only reads; `specs()` stays the listing from start.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any


from boundloop.checkpoints.cluster import state_dir
from boundloop.tools.client_features import ClientFeatures
from boundloop.tools.config import ServerConfig
from boundloop.tools.errors import BridgeError, UnknownServerError
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.connection import (
    CLOSE_TIMEOUT_S,
    MAX_RECONNECTS,
    STARTUP_TIMEOUT_S,
    AuthFactory,
    Connection,
    ProgressFn,
    close_connections,
)
from boundloop.tools.registry import ToolSpec
from boundloop.tools.secrets import Redactor

if TYPE_CHECKING:
    from boundloop.tools.shared_sessions import SharedSessions

logger = logging.getLogger(__name__)

__all__ = ["MCPBridge", "ProgressFn", "AuthFactory", "STARTUP_TIMEOUT_S", "CLOSE_TIMEOUT_S", "MAX_RECONNECTS"]


class MCPBridge:
    """MCP clients for every configured server, for the lifetime of one run (or one process).

    Use as `async with MCPBridge(servers) as bridge:` or call `start()` / `close()` yourself,
    from any asyncio tasks of one event loop.
    """

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        *,
        log_dir: Path | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        max_reconnects: int = MAX_RECONNECTS,
        auth: AuthFactory | None = None,
        shared: SharedSessions | None = None,
    ) -> None:
        self._id = uuid.uuid4().hex[:8]
        self._log_dir = log_dir or state_dir() / "logs"
        self._close_timeout_s = close_timeout_s
        self.redactor = Redactor.for_servers(servers.values())
        """Masks the servers' secrets (and the environment's) in everything the bridge returns or logs."""
        self._shared = {name: config for name, config in servers.items()
                        if config.shared and not config.oauth and not config.sampling and shared is not None}
        """Servers whose session comes from `shared` (started once per process; never closed here).
        Not with OAuth or sampling: their login and model belong to a run."""
        self._sessions = shared
        self._startup_timeout_s, self._max_reconnects = startup_timeout_s, max_reconnects
        self._connections = {
            name: Connection(config, self._log_dir / f"{name}.{self._id}.stderr.log", startup_timeout_s, self.redactor, max_reconnects, auth)
            for name, config in servers.items() if name not in self._shared
        }
        self._own = list(self._connections.values())
        self._started = False

    async def __aenter__(self) -> "MCPBridge":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self, *, strict: bool = True) -> None:
        """Connect to every server concurrently and list its tools.

        strict: a server that does not start raises its `ServerStartError` (after closing the
        others). Not strict: it is left out of `specs()`, its calls return `server_unavailable`,
        and `unavailable()` says why.
        """
        if self._started:
            raise BridgeError("MCPBridge.start() was called twice; one bridge connects once. Create a new MCPBridge.")
        self._started = True
        await asyncio.to_thread(self._log_dir.mkdir, parents=True, exist_ok=True)
        for connection in self._own:
            connection.launch()
        try:
            if self._sessions is not None and self._shared:
                sessions = await asyncio.gather(*(
                    self._sessions.acquire(config, log_dir=self._log_dir, startup_timeout_s=self._startup_timeout_s, max_reconnects=self._max_reconnects)
                    for config in self._shared.values()))
                self._connections.update(zip(self._shared, sessions))
            for connection in self._own:
                await connection.wait_started()
        except BaseException:  # cancelled while starting: leave no owner task or process behind
            await self.close()
            raise
        failed = [c.start_error for c in self._connections.values() if c.start_error is not None]
        if failed and strict:
            await self.close()
            raise failed[0]

    async def close(self) -> None:
        """Close every client from its owner task, then kill whatever is left of each server's process group.

        Idempotent, callable from any task; returns within about twice `close_timeout_s`.
        Shared sessions are left to their `SharedSessions`.
        """
        await close_connections(self._own, timeout_s=self._close_timeout_s)

    def specs(self) -> list[ToolSpec]:
        """Every tool of every server that started (a later crash does not remove them: their
        calls then return `server_unavailable`), hints from annotations, trust from the config."""
        return [spec for connection in self._connections.values() for spec in connection.specs()]

    def unavailable(self) -> dict[str, str]:
        """Servers that cannot take calls now, with the reason (did not start, crashed, closed).
        A crashed server is listed until a call reconnects it."""
        return {name: c.failure for name, c in self._connections.items() if c.failure is not None}

    def pids(self) -> dict[str, int]:  # shared servers included
        """Process ids of the stdio servers this bridge spawned (Linux; others: empty)."""
        return {name: c.pid for name, c in self._connections.items() if c.pid is not None}

    def features(self, server: str) -> ClientFeatures:
        """The server's client callbacks and its `tools/list_changed` flag (tools/client_features.py)."""
        connection = self._connections.get(server)
        if connection is None:
            raise UnknownServerError(server, list(self._connections))
        return connection.features

    async def current_specs(self, server: str, *, timeout_s: float, standing: bool = False) -> list[ToolSpec] | None:
        """The server's tools as it lists them now (not as it listed them at start), or None when
        it cannot say: not connected, crashed, or no complete listing within `timeout_s`. With
        `standing`, a trusted server's last listing that still stands (tools/fresh_listing.py) answers."""
        if not self._started:
            raise BridgeError("MCPBridge.current_specs() before start(); use `async with MCPBridge(...)` or await start() first.")
        connection = self._connections.get(server)
        if connection is None:
            raise UnknownServerError(server, list(self._connections))
        return await connection.current_specs(timeout_s, standing=standing)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        timeout_s: float,
        on_progress: ProgressFn | None = None,
    ) -> CallOutcome:
        """Run one tool call; always returns an outcome (ok, tool_error, timeout or server_unavailable).

        `timeout_s` applies unless the server's config sets its own `timeout_s`. A server whose
        connection died is reconnected first (within `max_reconnects`); `attempts` is 0 when the
        call could not be sent at all.
        """
        if not self._started:
            raise BridgeError("MCPBridge.call() before start(); use `async with MCPBridge(...)` or await start() first.")
        connection = self._connections.get(server)
        if connection is None:
            raise UnknownServerError(server, list(self._connections))
        return await connection.call(tool, arguments or {}, timeout_s=timeout_s, on_progress=on_progress)
