"""connection: one MCP server's `Client`, owned by one asyncio task, callable from any task.

Owns connecting (stdio spawn or streamable HTTP) and the handshake with its legacy fallback,
reconnecting after the connection died, listing the server's tools, and turning each call into
exactly one `CallOutcome`. `close_connections` ends connections and whatever is left of their
processes. The bridge (one connection per configured server) and the shared sessions (one per
identical shared config, across runs) are built on it.

Why an owner task per server: an anyio context (the SDK `Client`, its transport task group) must
be exited by the task that entered it, but LangGraph runs every node in its own asyncio task. So
each server's `Client` lives in a dedicated task that enters it, signals ready, waits for
`close()`, and exits it; calls from any task go through the client object. If the connection
dies (an HTTP peer going away cancels the transport's task group), the owner task ends, and
every call in flight returns `server_unavailable` at once instead of hanging.

Reconnect: the next call to a server whose connection died starts a new owner task (a new
process for stdio) and goes on if the handshake succeeds, at most `max_reconnects` times per
server and bridge, so one crash does not leave a tool dead for the rest of a long run while a
server that keeps dying is not restarted forever. Calls reach the bridge only through the gate,
whose server circuit stops sending calls (hence reconnects) to a server that keeps failing.
A call is never re-sent here: whether an unanswered call may be repeated is the ledger's and
dispatch's decision.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import math
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Implementation, Tool
from pydantic import ValidationError

from boundloop.graph.core import deadline
from boundloop.tools.client_features import ClientFeatures, forget_call
from boundloop.tools.config import ServerConfig
from boundloop.tools.errors import AuthorizationNeeded, ServerStartError
from boundloop.tools.fresh_listing import FreshListing
from boundloop.tools.http_auth import AuthRefusals
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolHints, ToolSpec, qualified_name
from boundloop.tools.processes import find_child_by_stderr, kill_leftovers
from boundloop.tools.secrets import Redactor


logger = logging.getLogger(__name__)

AuthFactory = Callable[[ServerConfig], httpx2.Auth]
"""The OAuth login of an HTTP server whose config sets `oauth` (tools/oauth.py), for this process."""
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
"""`async (progress, total, message)`, called for each progress notification of a call."""

STARTUP_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0
MAX_RECONNECTS = 3
"""Restarts of one server within one bridge (one run) after its connection died."""
_HARD_BOUND_GRACE_S = 1.0
"""Our own `fail_after` fires this long after the SDK's read timeout, in case the SDK's never does."""
_STDERR_TAIL_LINES = 15
_LIST_PAGE_CAP = 100
_CLIENT_INFO = Implementation(name="boundloop", version="0.1.0")

# Model-facing texts: the model reads them as tool results, so each says what happened and what it can do instead.
TIMED_OUT = (
    "timeout: {tool} gave no result within {timeout_s:g} s, so the call was cancelled. "
    "Ask for less (narrower arguments), or use another tool."
)
SERVER_UNAVAILABLE = (
    "server_unavailable: {tool} cannot run because MCP server {server!r} is unavailable ({reason}). "
    "Continue with other tools, or report that this source could not be reached."
)
PROTOCOL_ERROR = "tool_error: MCP server {server!r} rejected the call to {tool}: {message} (MCP error {code}). Check the tool name and arguments."
CONNECTION_CLOSED_REASON = "the connection closed: the server exited, crashed or hung up"
BAD_RESULT = "tool_error: {tool} returned a result that does not match the MCP schema or its output schema ({error}). Try another tool."


async def close_connections(connections: list["Connection"], *, timeout_s: float) -> None:
    """Close each client from its owner task, then kill whatever is left of each server's process group."""
    for connection in connections:
        connection.request_close()
    tasks = [c.task for c in connections if c.task is not None and not c.task.done()]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
    for connection in connections:
        for pid in connection.pids:
            kill_leftovers(pid)


class NotStarted(Exception):
    """The connection attempt failed before the server was ready (wraps the cause)."""


class Connection:
    """One server's `Client`, owned by one task; calls may come from any task."""

    def __init__(self, config: ServerConfig, log_path: Path, startup_timeout_s: float, redactor: Redactor, max_reconnects: int = MAX_RECONNECTS,
                 auth: AuthFactory | None = None) -> None:
        self.config = config
        self.auth = auth
        self.features = ClientFeatures(config.name, allow_sampling=config.sampling)
        self.refusals = AuthRefusals(config.name)
        self.path_root = config.path_root  # reads the cwd: here, off the event loop
        self.redactor = redactor
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.max_reconnects = max_reconnects
        self.reconnects = 0
        """Times this server was restarted after its connection died."""
        self.task: asyncio.Task[None] | None = None
        self.detached = False
        """Shared across runs (tools/shared_sessions.py): the owner task never sees a run's context."""
        self.client: Client | None = None
        self.tools: list[Tool] = []
        self.pid: int | None = None
        self.pids: list[int] = []
        """Every process spawned for this server (one per connect), for the cleanup at close."""
        self.failure: str | None = None
        self.start_error: ServerStartError | None = None
        self._listing: asyncio.Task[list[Tool] | None] | None = None
        """The `tools/list` in flight for calls about to be dispatched, if any."""
        self._fresh: FreshListing[list[Tool]] = FreshListing(trusted=config.trusted)
        """The last listing, while the server's own freshness hint lets it stand (tools/fresh_listing.py)."""
        self.features.on_tools_changed.append(self._fresh.forget)
        self._log_offset = 0
        """Where this attempt's stderr starts in the (appended) log file."""
        self._settled = asyncio.Event()
        self._closing = asyncio.Event()
        self._dead = asyncio.Event()
        self._ready_once = False
        self._reconnecting = asyncio.Lock()

    def launch(self) -> None:
        """Start the owner task. It outlives whatever call started it (a reconnect happens inside a
        tool call), so it must not inherit that call's scope: the server's later requests would be
        answered from, and charged to, a call that has ended. A shared session starts from an empty
        context every time, so no run's context reaches it."""
        context = contextvars.Context() if self.detached else contextvars.copy_context()
        context.run(forget_call)
        self.task = asyncio.create_task(self._own(), name=f"mcp-owner:{self.config.name}", context=context)

    async def reconnect(self) -> bool:
        """Start a new connection in place of a dead one; True when it is ready.

        Only a server that was connected once and died is restarted (one that never started
        is a configuration problem), never after close, and at most `max_reconnects` times.
        Concurrent callers share one attempt.
        """
        async with self._reconnecting:
            if self.client is not None and self.failure is None:
                return True  # another caller reconnected it meanwhile
            if not self._ready_once or self._closing.is_set() or self.reconnects >= self.max_reconnects:
                return False
            if self.task is not None and not self.task.done():  # the old owner still holds the dead client
                self.task.cancel()
                await asyncio.wait({self.task}, timeout=CLOSE_TIMEOUT_S)
                if not self.task.done():
                    return False  # it does not let go: never run two owners (and two processes) side by side
            self.reconnects += 1
            logger.warning("MCP server %r: reconnecting (%d of %d) after: %s", self.config.name, self.reconnects, self.max_reconnects, self.failure)
            self.failure, self.start_error, self.client = None, None, None
            self._settled, self._dead = asyncio.Event(), asyncio.Event()
            self.launch()
            await self.wait_started()
            return self.client is not None and self.failure is None

    async def wait_started(self) -> None:
        # The owner bounds its handshake itself; this outer bound only guards against a bug there.
        with anyio.move_on_after(self.startup_timeout_s * 2 + CLOSE_TIMEOUT_S):
            await self._settled.wait()

    def request_close(self) -> None:
        self._closing.set()

    def specs(self) -> list[ToolSpec]:
        return [self._spec(tool) for tool in self.tools]

    def _spec(self, tool: Tool) -> ToolSpec:
        return ToolSpec(
            server=self.config.name,
            name=tool.name,
            description=self.redactor.text(tool.description or tool.title or ""),
            input_schema=dict(tool.input_schema or {}),
            hints=ToolHints.from_annotations(tool.annotations),
            trusted=self.config.trusted,
            trusted_output=self.config.trusted_output,
            root=self.path_root,
            declared_paths=self.config.declared_paths(tool.name),
            output_schema=dict(tool.output_schema or {}),
        )

    async def current_specs(self, timeout_s: float, *, standing: bool) -> list[ToolSpec] | None:
        """Calls dispatched together share one listing (a wave of reads costs one round trip), and
        with `standing` a listing that still stands answers without one. A server whose connection
        died is reconnected first, as for a call (within `max_reconnects`): the listing is what
        stands between a call and its server, so it must not keep it dead."""
        if (self.client is None or self.failure is not None) and not await self.reconnect():
            return None
        client = self.client
        assert client is not None
        tools = self._fresh.standing() if standing else None
        if tools is None:
            if self._listing is None or self._listing.done():
                self._listing = asyncio.create_task(self._list_now(client, timeout_s), name=f"mcp-list:{self.config.name}")
            tools = await asyncio.shield(self._listing)
        return None if tools is None else [self._spec(tool) for tool in tools]

    async def _list_now(self, client: Client, timeout_s: float) -> list[Tool] | None:
        try:
            with anyio.fail_after(timeout_s):
                return await self._list_and_keep(client)
        except Exception as exc:  # a timeout, an MCP error, a broken stream: the listing cannot be trusted
            logger.info("MCP server %r: re-listing tools failed (%s)", self.config.name, self.redactor.text(_describe(_root(exc))))
            return None

    async def _list_and_keep(self, client: Client) -> list[Tool]:
        """All the server's tools, kept as the standing listing for as long as the server's hint allows."""
        asked = self._fresh.ask()
        tools, ttl_ms = await _list_all_tools(client)
        self._fresh.keep(tools, ttl_ms, asked)
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], *, timeout_s: float, on_progress: ProgressFn | None) -> CallOutcome:
        """The call's outcome, with any secret it quotes masked before the model or a log can see it."""
        outcome = await self._call(tool, arguments, timeout_s=timeout_s, on_progress=on_progress)
        if not self.redactor:
            return outcome
        return dataclasses.replace(outcome, text=self.redactor.text(outcome.text), structured=self.redactor.value(outcome.structured),
                                   detail=self.redactor.text(outcome.detail))

    async def _call(self, tool: str, arguments: dict[str, Any], *, timeout_s: float, on_progress: ProgressFn | None) -> CallOutcome:
        name = qualified_name(self.config.name, tool)
        if self.config.timeout_s is not None:  # the server's own timeout, still within the step's deadline
            timeout_s = deadline.bound(self.config.timeout_s)
        if self.client is None or self.failure is not None:
            failure = self.failure
            if not await self.reconnect():
                return self._unavailable(name, self.failure or failure or "not connected", 0.0, attempts=0)
        client = self.client
        assert client is not None
        started = time.perf_counter()

        def elapsed_ms() -> float:
            return (time.perf_counter() - started) * 1000

        try:
            with self.features.in_flight() as scope:  # server requests during the call find its run
                progress = on_progress or (scope.progress if scope is not None else None)
                result = await self._until_dead(
                    lambda: client.call_tool(tool, arguments, read_timeout_seconds=timeout_s, progress_callback=progress),
                    hard_timeout_s=timeout_s + _HARD_BOUND_GRACE_S,
                )
        except TimeoutError:
            return _timed_out(name, timeout_s, elapsed_ms(), "no answer within the hard bound; cancelled by the bridge")
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return _timed_out(name, timeout_s, elapsed_ms(), f"MCP request timeout ({exc.message}); the SDK sent notifications/cancelled")
            if exc.code == CONNECTION_CLOSED:
                self.failure = CONNECTION_CLOSED_REASON
                return self._unavailable(name, self.failure, elapsed_ms())
            if (refused := self.refusals.cause()) is not None:
                return CallOutcome("tool_error", text=f"tool_error: {name} was not run: {refused}.", latency_ms=elapsed_ms(),
                                   attempts=1, detail=f"{refused}; {self.refusals.fix()}")
            text = PROTOCOL_ERROR.format(server=self.config.name, tool=name, message=exc.message, code=exc.code)
            return CallOutcome("tool_error", text=text, latency_ms=elapsed_ms(), attempts=1, detail=f"MCP error {exc.code}")
        except ConnectionLost:
            return self._unavailable(name, self.failure or "the connection was lost", elapsed_ms())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            self.failure = f"the connection broke ({type(exc).__name__})"
            return self._unavailable(name, self.failure, elapsed_ms())
        except ValidationError as exc:
            error = f"{exc.error_count()} validation error(s), first: {exc.errors()[0]['msg']}"
            return CallOutcome("tool_error", text=BAD_RESULT.format(tool=name, error=error), latency_ms=elapsed_ms(), attempts=1, detail="result failed validation")
        return _result_outcome(result, elapsed_ms())

    async def _until_dead(self, call: Callable[[], Awaitable[CallToolResult]], *, hard_timeout_s: float) -> CallToolResult:
        """Run the call in this task, bounded, and abandon it the moment the owner task ends."""
        result: CallToolResult | None = None
        error: Exception | None = None
        with anyio.fail_after(hard_timeout_s):
            async with anyio.create_task_group() as group:

                async def cancel_when_dead() -> None:
                    await self._dead.wait()
                    group.cancel_scope.cancel()

                group.start_soon(cancel_when_dead)
                try:
                    result = await call()
                except Exception as exc:  # re-raised below, outside the task group, unwrapped
                    error = exc
                group.cancel_scope.cancel()
        if error is not None:
            raise error
        if result is None:
            raise ConnectionLost()
        return result

    def _unavailable(self, name: str, reason: str, latency_ms: float, attempts: int = 1) -> CallOutcome:
        text = SERVER_UNAVAILABLE.format(tool=name, server=self.config.name, reason=reason)
        return CallOutcome("server_unavailable", text=text, latency_ms=latency_ms, attempts=attempts, detail=reason)

    # -- the owner task ---------------------------------------------------------------------

    async def _own(self) -> None:
        try:
            modes = ["auto", "legacy"] if self.config.protocol == "auto" else ["legacy"]
            for mode in modes:
                try:
                    await self._serve(mode)
                    break
                except NotStarted as exc:
                    cause = exc.__cause__ or exc
                    if mode == modes[-1] or _not_worth_retrying(cause):
                        self.start_error = self._start_error(cause)
                        self.failure = f"did not start: {self.start_error.cause}"
                        break
                    logger.info("MCP server %r: %s handshake failed (%s); retrying with mode='legacy'",
                                self.config.name, mode, self.redactor.text(str(_root(cause))))
        except Exception as exc:  # the connection died after it was ready
            reason = self.redactor.text(f"the connection was lost: {_describe(_root(exc))}")
            logger.warning("MCP server %r: %s", self.config.name, reason)
            self.failure = self.failure or reason
        finally:
            self.client = None
            if self.failure is None:
                self.failure = "the bridge is closed"
            self._dead.set()
            self._settled.set()

    async def _serve(self, mode: str) -> None:
        """Connect in `mode`, list tools, signal ready, and hold the connection until close."""
        ready = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.startup_timeout_s) as deadline:
                async with AsyncExitStack() as stack:
                    client = Client(await self._transport(stack, mode), mode=mode, client_info=_CLIENT_INFO, cache=None,
                                    **self.features.client_kwargs())
                    await stack.enter_async_context(client)
                    if self.config.transport == "stdio":
                        self.pid = find_child_by_stderr(self.log_path)
                        if self.pid is not None:
                            self.pids.append(self.pid)
                    self._fresh.forget()  # a new connection (after a reconnect, perhaps another version of the server)
                    self.tools = await self._list_and_keep(client)
                    self.client, ready = client, True
                    self._ready_once = True
                    deadline.deadline = math.inf  # the scope stays open (anyio nesting); only startup is bounded
                    self._settled.set()
                    await self._closing.wait()
        except Exception as exc:
            if ready:
                raise
            raise NotStarted() from exc
        if not ready:  # the startup deadline fired mid-handshake; the SDK already unwound the transport
            raise NotStarted() from TimeoutError(f"no MCP handshake within {self.startup_timeout_s:g} s")

    async def _transport(self, stack: AsyncExitStack, mode: str) -> Any:
        config = self.config
        if config.transport == "stdio":
            errlog = stack.enter_context(self.log_path.open("a", encoding="utf-8"))
            errlog.write(f"--- boundloop: starting {config.name!r} (mode={mode}): {self.redactor.text(config.target)}\n")
            errlog.flush()
            self._log_offset = errlog.tell()
            params = StdioServerParameters(command=config.command or "", args=config.args, env=config.env or None, cwd=config.cwd)
            return stdio_client(params, errlog=errlog)
        read_s = max(300.0, (config.timeout_s or 0.0) + 30.0)  # the SSE stream of a long call stays open this long
        if config.oauth and self.auth is None:  # no token store in this process
            raise AuthorizationNeeded(config.name)
        http = httpx2.AsyncClient(headers=config.headers, timeout=httpx2.Timeout(self.startup_timeout_s, read=read_s),
                                  event_hooks={"response": [self.refusals.on_response]}, auth=self.auth(config) if config.oauth and self.auth else None)
        await stack.enter_async_context(http)
        return streamable_http_client(str(config.url), http_client=http)

    def _start_error(self, exc: BaseException) -> ServerStartError:
        config, root = self.config, _root(exc)
        if isinstance(root, TimeoutError):
            cause = str(root)
            fix = "check that the server speaks MCP on stdout (and logs only to stderr), or raise startup_timeout_s"
        elif isinstance(root, FileNotFoundError):
            cause = f"command or cwd not found ({root.filename or config.command})"
            fix = "use the absolute path of the server executable (a venv script, or node plus its dist/index.js; not npx/uvx) and an existing cwd"
        elif isinstance(root, PermissionError):
            cause = f"command is not executable ({config.command})"
            fix = "make it executable (chmod +x) or set command to its interpreter and put the script in args"
        elif isinstance(root, AuthorizationNeeded):
            cause = str(root)
            fix = f"log in once with `boundloop auth {config.name}` (same servers file and database), then start again"
        elif (refused := self.refusals.cause()) is not None:
            cause, fix = refused, self.refusals.fix()
        elif isinstance(root, httpx2.TransportError):
            cause = f"nothing answered at {config.url} ({_describe(root)})"
            fix = "start the server first, or correct the url (host, port and the /mcp path)"
        elif isinstance(root, MCPError) and root.code == CONNECTION_CLOSED and config.transport == "stdio":
            cause = "the server exited during the MCP handshake"
            fix = "read its stderr above (or run the command by hand); check args, env and cwd"
        else:
            cause = f"the handshake failed: {_describe(root)}"
            fix = "check that the url is the MCP endpoint and that headers carry the auth it needs" if config.transport == "http" else "read its stderr above and run the command by hand to reproduce"
        return ServerStartError(
            server=config.name,
            target=self.redactor.text(config.target),
            cause=self.redactor.text(cause),
            fix=f"{fix}; or start the bridge with strict=False to run without this server",
            stderr_tail=self.redactor.text(self._stderr_tail()),
            log_path=str(self.log_path) if config.transport == "stdio" else "",
        )

    def _stderr_tail(self) -> str:
        if self.config.transport != "stdio" or not self.log_path.exists():
            return ""
        with self.log_path.open("r", encoding="utf-8", errors="replace") as log:
            log.seek(self._log_offset)
            lines = [line.rstrip() for line in log.read().splitlines() if line.strip()]
        return "\n".join(lines[-_STDERR_TAIL_LINES:])


class ConnectionLost(Exception):
    """The owner task ended while a call was in flight."""


async def _list_all_tools(client: Client) -> tuple[list[Tool], int]:
    """Every page of the server's tools, and how long (ms) the server says the list stays as it
    is: the shortest `ttlMs` of its pages (0, immediately stale, where a page gives none)."""
    tools: list[Tool] = []
    ttl_ms: int | None = None
    cursor: str | None = None
    for _ in range(_LIST_PAGE_CAP):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        ttl_ms = page.ttl_ms if ttl_ms is None else min(ttl_ms, page.ttl_ms)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools, ttl_ms or 0


def _result_outcome(result: CallToolResult, latency_ms: float) -> CallOutcome:
    text = _render(result.content)
    if result.is_error:
        return CallOutcome("tool_error", text=text, latency_ms=latency_ms, attempts=1, detail="the tool reported an error (is_error)")
    return CallOutcome("ok", text=text, structured=result.structured_content, latency_ms=latency_ms, attempts=1)


def _render(content: list[Any]) -> str:
    """Text blocks verbatim; other blocks as a one-line note so the model knows they exist."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "unknown")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        else:
            mime = getattr(block, "mime_type", None) or getattr(getattr(block, "resource", None), "mime_type", None)
            parts.append(f"[{kind} content{f' ({mime})' if mime else ''} not shown]")
    return "\n".join(parts)


def _timed_out(name: str, timeout_s: float, latency_ms: float, detail: str) -> CallOutcome:
    return CallOutcome("timeout", text=TIMED_OUT.format(tool=name, timeout_s=timeout_s), latency_ms=latency_ms, attempts=1, detail=detail)


def _root(exc: BaseException) -> BaseException:
    """The first real cause inside (nested) exception groups and `NotStarted` wrappers."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        elif isinstance(exc, NotStarted) and exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            return exc


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _not_worth_retrying(exc: BaseException) -> bool:
    """A legacy handshake cannot help when nothing could be spawned or reached. It can help when
    the server hung up on, or never answered, the 2026 `server/discover` probe."""
    root = _root(exc)
    if isinstance(root, TimeoutError):  # an OSError subclass, but a silent server deserves the retry
        return False
    return isinstance(root, (OSError, httpx2.TransportError, AuthorizationNeeded))
