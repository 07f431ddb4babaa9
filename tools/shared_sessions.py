"""shared_sessions: MCP server sessions shared by the runs of one process.

Starting a stdio server costs about 0.8 s (a Python interpreter and its imports) per run. A server
whose config says `shared: true` (the default workspace server does) is started once per process
and identical config, and every run's bridge (tools/bridge.py) calls through that one session:
the SDK client multiplexes concurrent requests by id. Isolation stays where the config differs:
another `--root`, env, cwd, url or headers is another key, hence another server. Servers that
keep state between calls (a browser, a shell) must not set `shared`.

A shared session outlives the runs that used it and is closed with its `SharedSessions` (the
Runner's or the LangGraph server's `Services`). One that died is started afresh for the next run
that asks for it; within a run, the bridge's own reconnect applies.

The owner task of a shared session starts in an empty context, so no run's context variables
leak into it: callbacks from a server (elicitation, sampling, progress) must find the run they
serve from the request they answer, never from the context the session was opened in.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from boundloop.tools.connection import Connection, close_connections
from boundloop.tools.processes import proc_stat
from boundloop.tools.config import ServerConfig
from boundloop.tools.secrets import Redactor


class SharedSessions:
    """One live `Connection` per identical shared server config, for the lifetime of a process."""

    def __init__(self) -> None:
        self._sessions: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def acquire(self, config: ServerConfig, *, log_dir: Path, startup_timeout_s: float, max_reconnects: int) -> Connection:
        """The session of this config, started (or restarted, if it died) when needed.

        A server that does not start is returned with its `start_error`, like a bridge's own.
        """
        key = hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]
        async with self._locks.setdefault(key, asyncio.Lock()):
            session = self._sessions.get(key)
            if session is not None and _alive(session):
                return session
            if session is not None:  # it died (or never started): reap it, start a new one
                await close_connections([session], timeout_s=1.0)
            log_path = log_dir / f"{config.name}.shared-{key}.stderr.log"
            # Connection reads the server's cwd (its root): off the event loop, as the bridge does
            session = await asyncio.to_thread(Connection, config, log_path, startup_timeout_s, Redactor.for_servers([config]), max_reconnects)
            session.detached = True
            session.launch()
            self._sessions[key] = session
            await session.wait_started()
            return session

    def pids(self) -> list[int]:
        """Process ids of the live shared stdio servers."""
        return [session.pid for session in self._sessions.values() if session.pid is not None and session.failure is None]

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Close every shared session and reap its processes (a later `acquire` starts afresh)."""
        sessions, self._sessions = list(self._sessions.values()), {}
        await close_connections(sessions, timeout_s=timeout_s)


def _alive(session: Connection) -> bool:
    """Connected, and (stdio) its process still runs: a server killed a moment ago may not have
    closed its pipes yet, and the next run should not get its session."""
    if session.failure is not None or session.client is None:
        return False
    stat = proc_stat(session.pid) if session.pid is not None else ("R",)
    return stat is not None and stat[0] not in ("Z", "X")
