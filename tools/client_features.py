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

Elicitation is a LangGraph interrupt, like every other escalation (graph/calls/elicitation.py): a
question the run has no answer for yet is put in the scope (`scope.asked` is set) and the callback
waits; the caller cancels the call (the SDK sends `notifications/cancelled`), lets the callback go
(`release`, the server then gets `cancel`), and interrupts the run with the question. Resumed with
an answer, the call is sent again with the answer in `scope.answers`, keyed by `question_key`
(server, message, schema), and the server's same question is answered from it without asking.
Unattended runs decline. Each new question counts against `budget.escalations`; when none is left
it is declined without asking. Every request and its answer is added to the scope's `events`,
which the caller writes to the run's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
from mcp import types
from mcp.client.session import ClientRequestContext
from mcp.types import INVALID_REQUEST, ErrorData

T = TypeVar("T")
Sampler = Callable[[types.CreateMessageRequestParams], Awaitable[types.CreateMessageResult]]
Progress = Callable[[float, float | None, str | None], Awaitable[None]]

SAMPLING_NOT_ALLOWED = "sampling is not allowed for MCP server {server!r}: set \"sampling\": true in its config to let it use the run's model"
UNTIED = ("the server (2025 protocol) asked during one of several calls in flight on its session, so {what} cannot be "
          "tied to {to}; ask during one call at a time, or use the 2026-07-28 protocol")
NO_RUN = "no boundloop run is calling a tool on MCP server {server!r} now, so there is nobody to answer {method}"

_scope: contextvars.ContextVar["CallScope | None"] = contextvars.ContextVar("mcp_call_scope", default=None)


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
    stops_for_questions: bool = False
    """The caller sends through `until_question` and asks the human at an interrupt; otherwise a
    question without a stored answer is declined."""
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`question_key` -> the human's answer ({"action", "content"}), given at an interrupt before this send."""
    escalations: int = 0
    spent: dict[str, Any] = field(default_factory=dict)
    """What sampling cost (`usage`, `breakers`), filled by `sample`, for the caller to charge."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """What the server asked and what it got, in order (for the trace and the observation)."""
    question: dict[str, Any] | None = None
    """The first question with no answer yet: {"server", "tool", "message", "schema", "key"}."""
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when `question` is; the caller then cancels the call and calls `release`."""
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def next_send(self) -> None:
        """Forget the last send's unanswered question, before the call is sent again."""
        self.question = None
        self.asked.clear()
        self._released.clear()

    def release(self) -> None:
        """Let the callbacks waiting on an unanswered question return `cancel` to the server."""
        self._released.set()

    def count_asked(self, questions: int) -> None:
        """Count questions already asked at interrupts for this call (before a resume) as this call's."""
        tally = _asked.setdefault(self.run_id, [self.escalations_used, 0])
        tally[1] += questions
        self.escalations += questions

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


async def until_question(scope: CallScope, send: Awaitable[T]) -> T | None:
    """Await `send`, or cancel it as soon as the server asks a question `scope` has no answer for
    (then None, and `scope.question` says what was asked). Cancelling sends the server
    `notifications/cancelled`; its waiting callbacks are released and answer `cancel`."""
    scope.next_send()
    call = asyncio.ensure_future(send)
    asked = asyncio.ensure_future(scope.asked.wait())
    try:
        await asyncio.wait({call, asked}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        return None if call.cancelled() else call.result()
    finally:
        scope.release()
        asked.cancel()
        call.cancel()  # only if this task itself was cancelled while waiting


def current() -> CallScope | None:
    return _scope.get()


def forget_call() -> None:
    """No call in this context: for a task that outlives the call during which it was started."""
    _scope.set(None)


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
                scope.release()  # however the call ended, no callback keeps waiting for an answer

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

    def _untied(self) -> bool:
        """A 2025 server's request during several calls in flight on its session: which one made it is unknown."""
        return current() is None and len(self._in_flight) > 1

    async def on_elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult | ErrorData:
        scope, during = self._scope()
        if scope is None:
            return types.ElicitResult(action="decline")
        if isinstance(params, types.ElicitRequestURLParams):
            scope.record("elicitation", during, server=self.server, message=params.message, mode="url", action="decline",
                         why="URL-mode elicitation is not supported; the run never opens URLs for a server")
            return types.ElicitResult(action="decline")
        schema = params.requested_schema.model_dump(by_alias=True, exclude_none=True) if hasattr(params.requested_schema, "model_dump") else dict(params.requested_schema)
        key = question_key(self.server, params.message, schema)
        answer, why = scope.answers.get(key), None
        if answer is None and scope.unattended:
            answer, why = {"action": "decline"}, "the run is unattended"
        elif answer is None and not scope.stops_for_questions:
            answer, why = {"action": "decline"}, "nobody can be asked: the call is not a run's tool call"
        elif answer is None and self._untied():
            answer, why = {"action": "decline"}, UNTIED.format(what="the question", to="the call to stop")
        elif answer is None and not _take_escalation(scope):
            answer, why = {"action": "decline"}, "no escalations left in budget.escalations"
        elif answer is None:
            return await self._stop_for(scope, {"server": self.server, "tool": during, "message": params.message, "schema": schema, "key": key})
        else:
            why = "answered by a human at the run's interrupt"
        content = with_defaults(schema, answer.get("content") or {}) if answer["action"] == "accept" else None
        result = types.ElicitResult(action=answer["action"], content=content)
        scope.record("elicitation", during, server=self.server, message=params.message, schema=schema, action=result.action,
                     content=result.content, why=why)
        return result

    async def _stop_for(self, scope: CallScope, question: dict[str, Any]) -> types.ElicitResult:
        """Hand the question to the caller, which cancels the call; the server then gets `cancel`."""
        if scope.question is None:
            scope.question = question
            scope.asked.set()
        await scope._released.wait()
        return types.ElicitResult(action="cancel")

    async def on_sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult | ErrorData:
        scope, during = self._scope()
        if scope is None:
            return ErrorData(code=INVALID_REQUEST, message=NO_RUN.format(server=self.server, method="sampling/createMessage"))
        request = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        if not self.allow_sampling or scope.sample is None or self._untied():
            message = (SAMPLING_NOT_ALLOWED.format(server=self.server) if not self.allow_sampling else "this run has no model to sample from"
                       if scope.sample is None else UNTIED.format(what="the completion", to="the call that pays for it"))
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


def question_key(server: str, message: str, schema: dict[str, Any]) -> str:
    """Which question an answer is for: the same server asking the same thing in the same shape."""
    material = json.dumps([server, message, schema], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(material.encode()).hexdigest()[:32]


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
