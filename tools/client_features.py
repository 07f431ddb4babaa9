"""client_features: what an MCP server may ask of us while one of its tools runs — elicitation
(a question for the human), sampling (a completion from the run's model), roots (the run's
workspace) — plus its progress notifications and `tools/list_changed`.

Which run a server request belongs to: the caller sets a `CallScope` around each tool call
(`calling(scope)`, a contextvar). A request that arrives inside `call_tool` itself (the 2026
multi-round-trip flow) sees that contextvar. One that arrives on the session's receive loop (a
2025 server pushing `elicitation/create` during the call) runs in the connection's owner task,
where the contextvar is unset; it gets the scope of the calls in flight on that connection, if
they all belong to one run, else none. No scope means no run to answer for: elicitation is
declined, sampling refused, roots empty. Nothing here is bound to a session at creation, so a
session shared across runs (tools/shared_sessions.py) routes each request to the right run.

Elicitation guarantee (see README "What a server may ask"): the answer is obtained inside the
live process that drives the run, from the human registered with `attend(human)` (the CLI does
this for an attended run on a terminal). It is not a LangGraph interrupt: the tool call stays in
flight while the human answers, so nothing is re-sent, and a crash while waiting loses the
question (the call then ends like any call cut off by a crash: the ledger's `unknown_after_crash`
for side effects). Unattended runs, and processes without a registered human (server, workers),
decline. Each question asked counts against `budget.escalations`; when none is left it is
declined without asking. Every request and its answer is added to the scope's `events`, which the
caller writes to the run's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from mcp import types
from mcp.client.session import ClientRequestContext
from mcp.types import INVALID_REQUEST, ErrorData

Human = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""`async (question) -> {"action": "accept"|"decline"|"cancel", "content": {...}}`; the question is
{"type": "elicitation", "server", "tool", "message", "schema", "problem" (the last answer's, or None)}."""
Sampler = Callable[[types.CreateMessageRequestParams], Awaitable[types.CreateMessageResult]]
Progress = Callable[[float, float | None, str | None], Awaitable[None]]

MAX_ANSWERS = 3
"""Answers a human may give to one question before an invalid one is taken as cancel."""
SAMPLING_NOT_ALLOWED = "sampling is not allowed for MCP server {server!r}: set \"sampling\": true in its config to let it use the run's model"
NO_RUN = "no boundloop run is calling a tool on MCP server {server!r} now, so there is nobody to answer {method}"

_scope: contextvars.ContextVar["CallScope | None"] = contextvars.ContextVar("mcp_call_scope", default=None)
_human: contextvars.ContextVar[Human | None] = contextvars.ContextVar("mcp_human", default=None)


@dataclass
class CallScope:
    """One tool call of one run, as the server requests made during it see it."""

    run_id: str
    tool: str
    unattended: bool = True
    escalations_used: int = 0
    """`usage.escalations` of the run when the call was sent."""
    escalations_limit: int | None = 0
    """`budget.escalations` (None: unlimited). Calls of one run in flight together share what is left."""
    sample: Sampler | None = None
    """The run's model under its budget and breaker; None refuses sampling."""
    roots: tuple[str, ...] = ()
    """Directories advertised as roots (the run's workspace)."""
    progress: Progress | None = None
    human: Human | None = None
    """Who answers questions; by default the human registered with `attend()` when the scope is made."""
    escalations: int = 0
    spent: dict[str, Any] = field(default_factory=dict)
    """What sampling cost (`usage`, `breakers`), filled by `sample`, for the caller to charge."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """What the server asked and what it got, in order (for the trace and the observation)."""

    def __post_init__(self) -> None:
        if self.human is None and not self.unattended:
            self.human = _human.get()

    def record(self, kind: str, during: str, **details: Any) -> None:
        self.events.append({"kind": kind, "tool": during, "at": time.time(), **details})


_asked: dict[str, list[int]] = {}
"""run id -> [escalations used when its calls in flight were sent, questions they asked since]."""
_active: dict[str, int] = {}
"""run id -> its calls in flight (inside `calling`)."""


@contextlib.contextmanager
def calling(scope: CallScope) -> Iterator[CallScope]:
    """Make `scope` the current call's scope for this task (and the tasks it starts)."""
    token = _scope.set(scope)
    _active[scope.run_id] = _active.get(scope.run_id, 0) + 1
    try:
        yield scope
    finally:
        _scope.reset(token)
        _active[scope.run_id] -= 1
        if not _active[scope.run_id]:
            del _active[scope.run_id]
            _asked.pop(scope.run_id, None)


def _take_escalation(scope: CallScope) -> bool:
    """Count one question against the run's `budget.escalations`; False when none is left. Calls
    sent together (one step) saw the same `usage.escalations`, so they share one tally."""
    tally = _asked.get(scope.run_id)
    if tally is None or tally[0] != scope.escalations_used:
        tally = _asked[scope.run_id] = [scope.escalations_used, 0]
    if scope.escalations_limit is not None and tally[0] + tally[1] >= scope.escalations_limit:
        return False
    tally[1] += 1
    scope.escalations += 1
    return True


def current() -> CallScope | None:
    return _scope.get()


@contextlib.contextmanager
def attend(human: Human) -> Iterator[None]:
    """Register `human` as who answers servers' questions for attended runs started inside."""
    token = _human.set(human)
    try:
        yield
    finally:
        _human.reset(token)


class ClientFeatures:
    """The callbacks of one server's MCP client, and its `tools/list_changed` flag."""

    def __init__(self, server: str, *, allow_sampling: bool = False) -> None:
        self.server = server
        self.allow_sampling = allow_sampling
        self.tools_changed = asyncio.Event()
        """Set when the server sends `notifications/tools/list_changed`; whoever re-lists clears it."""
        self.on_tools_changed: list[Callable[[], None]] = []
        """Called on each `tools/list_changed` (e.g. the pinning module invalidating its listing)."""
        self._in_flight: list[CallScope] = []

    def client_kwargs(self) -> dict[str, Any]:
        """What to pass to `mcp.Client`: the callbacks, sampling only when the config allows it
        (so the capability is not advertised otherwise)."""
        kwargs: dict[str, Any] = {
            "elicitation_callback": self.on_elicitation,
            "list_roots_callback": self.on_list_roots,
            "message_handler": self.on_message,
        }
        if self.allow_sampling:
            kwargs["sampling_callback"] = self.on_sampling
        return kwargs

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[CallScope | None]:
        """Around one `call_tool` on this connection: the current scope, findable from the receive loop."""
        scope = current()
        if scope is not None:
            self._in_flight.append(scope)
        try:
            yield scope
        finally:
            if scope is not None:
                self._in_flight.remove(scope)

    def _scope(self) -> tuple[CallScope | None, str]:
        """The scope a server request belongs to, and the call(s) it was made during (a 2025
        server's request does not say which of several calls in flight on its session it is for)."""
        scope = current()
        if scope is not None:
            return scope, scope.tool
        runs = {candidate.run_id for candidate in self._in_flight}
        if len(runs) != 1:
            return None, ""
        tools = sorted({candidate.tool for candidate in self._in_flight})
        return self._in_flight[0], tools[0] if len(tools) == 1 else f"one of {', '.join(tools)}"

    async def on_elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult | ErrorData:
        scope, during = self._scope()
        if scope is None:
            return types.ElicitResult(action="decline")
        if isinstance(params, types.ElicitRequestURLParams):
            scope.record("elicitation", during, server=self.server, message=params.message, mode="url", action="decline",
                         why="URL-mode elicitation is not supported; the run never opens URLs for a server")
            return types.ElicitResult(action="decline")
        schema = params.requested_schema.model_dump(by_alias=True, exclude_none=True) if hasattr(params.requested_schema, "model_dump") else dict(params.requested_schema)
        result, why = await self._ask(scope, during, params.message, schema)
        scope.record("elicitation", during, server=self.server, message=params.message, schema=schema, action=result.action,
                     content=result.content, why=why)
        return result

    async def _ask(self, scope: CallScope, during: str, message: str, schema: dict[str, Any]) -> tuple[types.ElicitResult, str | None]:
        if scope.unattended or scope.human is None:
            why = "the run is unattended" if scope.unattended else "no human answers questions in this process"
            return types.ElicitResult(action="decline"), why
        if not _take_escalation(scope):
            return types.ElicitResult(action="decline"), "no escalations left in budget.escalations"
        problem: str | None = None
        for _ in range(MAX_ANSWERS):
            answer = await scope.human({"type": "elicitation", "server": self.server, "tool": during,
                                        "message": message, "schema": schema, "problem": problem})
            action = answer.get("action")
            if action in ("decline", "cancel"):
                return types.ElicitResult(action=action), None
            if action != "accept":
                problem = f"action must be accept, decline or cancel (got {action!r})"
                continue
            content = with_defaults(schema, answer.get("content") or {})
            problem = invalid(schema, content)
            if problem is None:
                return types.ElicitResult(action="accept", content=content), None
        return types.ElicitResult(action="cancel"), f"no valid answer after {MAX_ANSWERS} tries: {problem}"

    async def on_sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult | ErrorData:
        scope, during = self._scope()
        if scope is None:
            return ErrorData(code=INVALID_REQUEST, message=NO_RUN.format(server=self.server, method="sampling/createMessage"))
        request = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        if not self.allow_sampling or scope.sample is None:
            message = SAMPLING_NOT_ALLOWED.format(server=self.server) if not self.allow_sampling else "this run has no model to sample from"
            scope.record("sampling", during, server=self.server, request=request, refused=message)
            return ErrorData(code=INVALID_REQUEST, message=message)
        try:
            reply = await scope.sample(params)
        except SamplingRefused as refused:
            scope.record("sampling", during, server=self.server, request=request, refused=str(refused))
            return ErrorData(code=INVALID_REQUEST, message=str(refused))
        scope.record("sampling", during, server=self.server, request=request, reply=reply.model_dump(by_alias=True, mode="json", exclude_none=True))
        return reply

    async def on_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        scope, _ = self._scope()
        roots = [] if scope is None else [types.Root(uri=Path(root).resolve().as_uri(), name=Path(root).name) for root in scope.roots]
        return types.ListRootsResult(roots=roots)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed.set()
            for callback in self.on_tools_changed:
                callback()


class SamplingRefused(Exception):
    """The run cannot serve a sampling request (budget spent, model circuit open, deadline): the message says why."""


def with_defaults(schema: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    """`content` with each omitted property that has a `default` in the schema filled in (SEP-1034)."""
    filled = dict(content)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    return filled


def invalid(schema: dict[str, Any], content: dict[str, Any]) -> str | None:
    """Why `content` does not satisfy `schema` (one line), or None."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(content))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"
