"""runner: start, resume and inspect runs against Postgres — what the CLI and Python callers share.

A run is a LangGraph thread. `Runner` owns the connection pool, the checkpointer and the
services for the life of one process, streams a run's node updates to an observer, and reports
where the run stands: ended (a terminal code) or waiting for a human (pending interrupts).

Keeps the run registry honest: `running` while driven (and the lease is held), `waiting` with what
for, `stopped` with the error, or the terminal code finalize wrote. A cancel stops the step in
flight at once (its model or tool call is cancelled; every saved step stays saved). A database
that goes away mid-run is waited for, with backoff, up to `DB_OUTAGE_S`; when it is back the run
continues from its last checkpoint (the ledger keeps side effects exactly once), otherwise the
drive ends with `DatabaseLost`, which says how to resume.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack, suppress
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, StateSnapshot, StreamMode
from psycopg_pool import PoolTimeout

from boundloop.checkpoints import approvals, queue, store
from boundloop.checkpoints.errors import ApprovalRefused, CheckpointUnreadable, DatabaseLost
from boundloop.checkpoints.pool import database_url, open_pool
from boundloop.checkpoints.saver import postgres_saver
from boundloop.graph.builder import RECURSION_LIMIT, build_graph
from boundloop.graph.core import escalations
from boundloop.graph.core.errors import ConfigError, RunExists, RunNotFound, RunStopped
from boundloop.graph.trace import langsmith as langsmith_trace
from boundloop.graph.run.halt import halt
from boundloop.graph.trace.progress import PHASE_PROGRESS_STREAMED
from boundloop.graph.trace.record import REOPENABLE
from boundloop.graph.core.capacity import MAX_ACTIVE_RUNS
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task

_INTERRUPT = "__interrupt__"
"""LangGraph's key for a step's interrupts, in its "updates" and "values" stream chunks."""

Observer = Callable[[str, dict[str, Any], dict[str, Any]], None]
"""Called after each node with (node name, its update, the run state so far)."""

DB_OUTAGE_S = 30.0
"""How long one drive waits for a database that went away (a restart takes a few seconds);
`BOUNDLOOP_DB_OUTAGE_S` changes it."""
DB_RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0)
"""Backoff between reconnect attempts; the last delay repeats until DB_OUTAGE_S is spent."""
MAX_OUTAGES_PER_DRIVE = 3
"""Outages one drive rides out; a database that keeps dropping stops the drive."""
CANCEL_UNWIND_S = 10.0
"""How long a cancelled step may take to unwind (the SDK tells the tool server to cancel)."""


@dataclass
class RunReport:
    """Where a run stands after the process stopped driving it."""

    thread_id: str
    status: str
    """A terminal code, or CONFIRM_REQUIRED while interrupts wait for a human."""
    values: dict[str, Any]
    interrupts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        return self.values.get("result") or {}

    @property
    def waiting(self) -> bool:
        return bool(self.interrupts)


def new_thread_id() -> str:
    """A fresh run's thread id."""
    return f"run-{uuid.uuid4().hex[:12]}"


class Runner:
    """`async with Runner() as runner:` — one pool, one saver, one compiled graph per process."""

    def __init__(self, url: str | None = None, *, install_postgres: bool = False, max_active_runs: int = MAX_ACTIVE_RUNS,
                 warm: tuple[str, RunSettings] | None = None) -> None:
        """`warm`: a run about to start here, (its thread id, its settings), whose tool servers start
        while the runner opens, so its intake finds them up (`Services.warm`)."""
        self._url = url
        self._install = install_postgres
        self._warm = warm
        self._max_active_runs = max_active_runs
        self._stack = AsyncExitStack()
        self._cancel = asyncio.Event()

    async def __aenter__(self) -> "Runner":
        url = self._url
        if not url:
            url = await asyncio.to_thread(database_url, install=self._install)
        self._url = url
        self.pool = await open_pool(url)
        self._stack.push_async_callback(self.pool.close)
        self.services = Services(pool=self.pool, max_active_runs=self._max_active_runs)
        self._stack.push_async_callback(self.services.aclose)
        if self._warm is not None:
            thread_id, settings = self._warm
            self.services.warm(thread_id, settings.model_dump(mode="json"))
        saver = await self._stack.enter_async_context(postgres_saver(self.pool))
        # Built off the loop, so that servers being warmed keep starting meanwhile.
        self.graph = await asyncio.to_thread(build_graph, checkpointer=saver, services=self.services)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()

    async def start(self, task: Task, settings: RunSettings, *, thread_id: str | None = None, observe: Observer | None = None) -> RunReport:
        """Start a run. Resubmitting a task that already committed on this thread returns the
        committed result without running anything."""
        thread_id = thread_id or new_thread_id()
        existing = await store.get_run(self.pool, thread_id)
        if existing is not None:
            if existing.task_hash == task.content_hash() and existing.status == Terminal.SUCCESS:
                return await self.report(thread_id)
            raise RunExists(thread_id, existing.status)
        graph_input = {"task": task.model_dump(mode="json"), "settings": settings.model_dump(mode="json")}
        # Not registered yet: intake registers it, as running, in the drive's first step.
        return await self._drive(thread_id, graph_input, observe, context=settings, registered=False)

    def cancel(self) -> None:
        """Stop the run being driven now: the step in flight is cancelled (its model or tool call
        with it) and the run keeps its last saved step, resumable."""
        self._cancel.set()

    async def resume(self, thread_id: str, *, decisions: dict[str, Any] | None = None, observe: Observer | None = None) -> RunReport:
        """Continue a run from its last checkpoint: after a crash (no decisions), with human decisions,
        or after a dependency was unavailable (UNAVAILABLE_DEP: the phase that stopped runs again)."""
        snapshot = await self._snapshot(thread_id)
        if not snapshot.values:
            raise RunNotFound(f"no run {thread_id!r} in this database; list runs with `boundloop runs`")
        # A kill can land after a task saved its writes but before the step's checkpoint: then
        # `next` is empty while `tasks` still holds the task, and resuming applies its writes.
        if not snapshot.next and not snapshot.tasks:
            reopen = _reopening(snapshot.values)
            return await (self._drive(thread_id, reopen, observe) if reopen else self.report(thread_id))
        decisions = decisions or _expired_rejections(snapshot.interrupts)
        command: Command[Any] | None = Command(resume=decisions) if decisions else None
        return await self._drive(thread_id, command, observe)

    async def decide(self, thread_id: str, call_id: str, decision: dict[str, Any], *, observe: Observer | None = None) -> RunReport:
        """Decide one pending approval (bound to its call and argument hash), then continue the run.

        Refused (`ApprovalRefused`, nothing recorded as decided by this call): a call that is not
        waiting, other arguments, a request past its expiry (it counts as a rejection, which
        `resume` applies), or a decision the run itself refused (it asks again).
        """
        snapshot = await self._snapshot(thread_id)
        if not snapshot.interrupts and (snapshot.next or snapshot.tasks):
            # Killed on its way to the interrupt (request recorded, wait not yet saved): get there first.
            await self.resume(thread_id, observe=observe)
            snapshot = await self._snapshot(thread_id)
        waiting = {item.value.get("call_id"): item for item in snapshot.interrupts if isinstance(item.value, dict)}
        if call_id not in waiting:
            known = sorted(key for key in waiting if key)
            raise ApprovalRefused(thread_id, call_id, f"nothing is waiting for it; waiting: {known or 'nothing'}")
        item = waiting[call_id]
        if decision.get("args_hash") not in (None, item.value.get("args_hash")):
            raise ApprovalRefused(thread_id, call_id, "the decision is for other arguments than the ones the request was made for (argument hash mismatch)")
        if item.value.get("type") != "tool_approval":
            report = await self.resume(thread_id, decisions={item.id: as_resume_value(item.value, thread_id, call_id, decision)}, observe=observe)
            _refused_again(report, thread_id, call_id)
            return report
        expires_at = item.value.get("expires_at")
        if expires_at is not None and expires_at < time.time():
            at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires_at))
            raise ApprovalRefused(thread_id, call_id, f"the request expired at {at} and counts as a rejection; "
                                                      f"`boundloop resume {thread_id}` continues the run with it rejected")
        bound = {**decision, "call_id": call_id, "args_hash": item.value.get("args_hash")}
        report = await self.resume(thread_id, decisions={item.id: bound}, observe=observe)
        _refused_again(report, thread_id, call_id)
        return report

    async def pending(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Approval requests waiting for a human, across all runs unless one is named."""
        return [asdict(row) for row in await approvals.pending_approvals(self.pool, thread_id)]

    async def report(self, thread_id: str) -> RunReport:
        snapshot = await self._snapshot(thread_id)
        if not snapshot.values:
            raise RunNotFound(f"no run {thread_id!r} in this database; list runs with `boundloop runs`")
        interrupts = [{"id": item.id, "value": item.value} for item in snapshot.interrupts]
        status = snapshot.values.get("status", {}).get("terminal") or (escalations.waiting_status([item["value"] for item in interrupts]) if interrupts else "INTERRUPTED")
        return RunReport(thread_id, str(status), dict(snapshot.values), interrupts)

    async def runs(self, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """The newest runs (`offset` newer ones skipped), each with the worker driving it when the worker pool does (`worker`)."""
        rows = [asdict(run) for run in await store.list_runs(self.pool, limit=limit, offset=offset)]
        held = await queue.holders(self.pool, [row["thread_id"] for row in rows])
        return [row | {"worker": held.get(row["thread_id"])} for row in rows]

    async def trace(self, thread_id: str) -> list[dict[str, Any]]:
        return [asdict(event) for event in await store.read_trace(self.pool, thread_id)]

    async def _snapshot(self, thread_id: str) -> StateSnapshot:
        """The run's latest checkpoint; `CheckpointUnreadable` when it does not decode."""
        if "\x00" in thread_id:  # PostgreSQL text cannot hold it: no run can have such an id
            raise RunNotFound(f"no run {thread_id!r}: a run id cannot contain a NUL character")
        try:
            return await self.graph.aget_state(_config(thread_id))
        except (psycopg.Error, PoolTimeout):
            raise
        except Exception as error:  # whatever a corrupted blob makes the serializer raise
            raise CheckpointUnreadable(thread_id, _one_line(error)) from error

    async def _drive(self, thread_id: str, graph_input: Any, observe: Observer | None, context: RunSettings | None = None, *,
                     registered: bool = True) -> RunReport:
        """Drive the run until it ends, waits or is cancelled, riding out short database outages.
        `registered`: the run may be in the registry (False: `start` found it absent)."""
        outages = 0
        while True:
            try:
                return await self._drive_leased(thread_id, graph_input, observe, context, registered)
            except Exception as error:
                lost = _connection_lost(error)
                if lost is None:
                    raise
                outages += 1
                if outages > MAX_OUTAGES_PER_DRIVE or not await self._database_back():
                    raise DatabaseLost(thread_id, _one_line(lost)) from error
            registered = True  # intake may have registered it before the outage
            # Back: continue from the last checkpoint (the original input if none was saved yet).
            if (await self._snapshot(thread_id)).values:
                graph_input = None

    async def _drive_leased(self, thread_id: str, graph_input: Any, observe: Observer | None, context: RunSettings | None,
                            registered: bool = True) -> RunReport:
        async with self.services.driving(thread_id):
            if registered:  # an UPDATE: a run not in the registry is registered by intake
                await store.set_run_status(self.pool, thread_id, store.RUNNING)
            seen = _Seen()
            try:
                if await self._stream(thread_id, graph_input, observe, context, seen):
                    return await self._halt(thread_id)
            except Exception as error:
                if _connection_lost(error) is not None:
                    raise
                with suppress(psycopg.Error, PoolTimeout):
                    await store.set_run_status(self.pool, thread_id, store.STOPPED, error=f"{type(error).__name__}: {_one_line(error)}")
                raise RunStopped(thread_id, error) from error
            report = seen.ended(thread_id) or await self.report(thread_id)
            if report.waiting:
                await store.set_run_status(self.pool, thread_id, store.WAITING, result={"waiting_for": escalations.waiting_for([item["value"] for item in report.interrupts])})
            elif (report.values.get("status") or {}).get("terminal") not in (None, *REOPENABLE):
                await store.close_run(self.pool, thread_id)  # after finalize's checkpoint: a finalize re-run after a kill still writes its trace
            return report

    async def _stream(self, thread_id: str, graph_input: Any, observe: Observer | None, context: RunSettings | None,
                      seen: _Seen | None = None) -> bool:
        """Stream the run's steps to `observe`; True when a cancel stopped it first. `seen` keeps
        the state after the last step, and whether the run stopped at an interrupt.

        The stream runs in its own task so a cancel does not wait for the step in flight: that
        task is cancelled, which cancels the node's model or tool call (a side effect cut off
        this way stays an INTENT in the ledger, reconciled on resume). A cancel between nodes
        (say, right after a node's update was observed) first lets the finished step be saved:
        the drive stops when its next node is held at its start (graph/core/stops.py).
        """
        state: dict[str, Any] = {}
        seen = seen or _Seen()
        show = (getattr(observe, "custom", None) or None) if observe else None

        async def consume() -> None:
            # durability="sync": each step's checkpoint is written before the next step starts,
            # so a kill or a cancel loses at most the step in flight.
            known = await self._known(thread_id, graph_input) if langsmith_trace.enabled() else {}
            PHASE_PROGRESS_STREAMED.set(show is not None)  # this task's context: the drive's nodes inherit it
            modes: list[StreamMode] = ["updates", "values"]
            if show is not None:
                modes.append("custom")
            async with langsmith_trace.run_root(thread_id, known, self.services.graph_version, self.pool) as finish:
                # with a list of modes LangGraph yields (mode, chunk) pairs; its overloads say only Any
                stream = cast("AsyncIterator[tuple[str, Any]]", self.graph.astream(graph_input, _config(thread_id), context=context, stream_mode=modes, durability="sync"))
                async for mode, chunk in stream:
                    if mode == "values":  # the state once the step's writes are applied: what its checkpoint saves
                        seen.values = chunk
                        seen.interrupted = seen.interrupted or _INTERRUPT in chunk
                        continue
                    if mode == "custom":  # e.g. a tool's progress (graph/calls/scope.py); asked for only when `observe` takes it
                        if show is not None:
                            show(chunk)
                        continue
                    seen.interrupted = seen.interrupted or _INTERRUPT in chunk
                    for node, update in chunk.items():
                        if isinstance(update, dict) and not node.startswith("__"):  # not `__metadata__` and the like
                            state.update(update)
                            if observe:
                                observe(node, update, state)
                finish({**known, **state, **(seen.values or {})})  # the values: whole channels (an update holds a delta of usage)

        halted = False
        with self.services.stops.watch(thread_id) as drive:
            steps = asyncio.create_task(consume(), name=f"drive:{thread_id}")
            cancel = asyncio.create_task(self._cancel.wait())
            try:
                await asyncio.wait({steps, cancel}, return_when=asyncio.FIRST_COMPLETED)
                if not steps.done() and not drive.stop():
                    await _first_of(steps, drive.held.wait(), timeout=CANCEL_UNWIND_S)
            finally:
                cancel.cancel()
                if not steps.done():
                    halted = True
                    steps.cancel()
                    await asyncio.wait({steps}, timeout=CANCEL_UNWIND_S)
        if halted:
            if steps.done() and not steps.cancelled():
                steps.exception()  # whatever the cut-off step raised while unwinding is moot: the run halts
            return True
        steps.result()  # re-raises what stopped the stream
        return False

    async def _known(self, thread_id: str, graph_input: Any) -> dict[str, Any]:
        """What is known of the run before this drive: its input when it starts, its state when it continues."""
        return dict(graph_input) if isinstance(graph_input, dict) else dict((await self._snapshot(thread_id)).values)

    async def _database_back(self) -> bool:
        """Wait, with backoff, for the database to answer again; then drop the pool's dead connections."""
        deadline = time.monotonic() + outage_window_s()
        attempt = 0
        while True:
            await asyncio.sleep(DB_RETRY_DELAYS_S[min(attempt, len(DB_RETRY_DELAYS_S) - 1)])
            attempt += 1
            try:
                assert self._url is not None, "__aenter__ set it"
                connection = await psycopg.AsyncConnection.connect(self._url, connect_timeout=2)
            except psycopg.Error:
                if time.monotonic() >= deadline:
                    return False
                continue
            await connection.close()
            await self.pool.check()
            return True

    async def _halt(self, thread_id: str) -> RunReport:
        """A cancelled run: USER_CANCEL with its halt record, its checkpoint left resumable."""
        await halt(self.graph, thread_id, self.services)
        report = await self.report(thread_id)
        # A thread with nothing pending (a run halted before its first checkpoint) gets no state
        # update; the registry has USER_CANCEL either way, and so does the report.
        report.status = Terminal.USER_CANCEL
        return report


@dataclass
class _Seen:
    """What one drive's stream showed of the run."""

    values: dict[str, Any] | None = None
    """The state after the last step (stream mode "values"): the values of the checkpoint that step saved."""
    interrupted: bool = False

    def ended(self, thread_id: str) -> RunReport | None:
        """The report of a run that reached its end in this drive (finalize set its terminal code and
        nothing waits), without reading back the state the stream already showed; None otherwise:
        a run waiting for a human is reported from its checkpoint (`Runner.report`), pending requests and all."""
        if self.interrupted or not self.values:
            return None
        terminal = (self.values.get("status") or {}).get("terminal")
        return RunReport(thread_id, str(terminal), dict(self.values)) if terminal else None


async def _first_of(task: asyncio.Task[Any], other: Coroutine[Any, Any, Any], *, timeout: float) -> None:
    """Wait until `task` is done or `other` completes, at most `timeout` seconds."""
    waiter = asyncio.ensure_future(other)
    try:
        await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def outage_window_s() -> float:
    """Seconds a drive waits for a lost database: BOUNDLOOP_DB_OUTAGE_S, else DB_OUTAGE_S."""
    raw = os.environ.get("BOUNDLOOP_DB_OUTAGE_S", "")
    try:
        value = float(raw) if raw else DB_OUTAGE_S
    except ValueError:
        raise ConfigError(f"BOUNDLOOP_DB_OUTAGE_S={raw!r} is not a number of seconds; e.g. BOUNDLOOP_DB_OUTAGE_S=30") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"BOUNDLOOP_DB_OUTAGE_S={raw!r} must be a finite number of seconds, 0 or more; e.g. 30")
    return value


def _connection_lost(error: BaseException) -> BaseException | None:
    """The database error in `error`'s chain that means the connection is gone, if any.

    The chain matters: an error in the lease's unlock (on a dead connection) has the real error
    as its context.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (psycopg.OperationalError, PoolTimeout)):
            return current
        current = current.__cause__ or current.__context__
    return None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text or type(error).__name__)[:300]


def _reopening(values: dict[str, Any]) -> Command | None:
    """A run that ended UNAVAILABLE_DEP continues at the phase its dependency stopped (`resume_to`)."""
    stopped = values.get("ending") or {}
    if stopped.get("code") != Terminal.UNAVAILABLE_DEP or not stopped.get("resume_to"):
        return None
    return Command(update={"ending": None, "result": None, "status": {"phase": "resume"}}, goto=stopped["resume_to"])


def _refused_again(report: RunReport, thread_id: str, call_id: str) -> None:
    """The run refused the decision and asks again: say why, and how many more it takes, in one line."""
    for waiting in report.interrupts:
        value = waiting["value"] if isinstance(waiting["value"], dict) else {}
        if value.get("call_id") == call_id and value.get("refused"):
            raise ApprovalRefused(thread_id, call_id, f"{value['refused']}; the run still waits for a decision ({asks_left(value)})")


def asks_left(request: dict[str, Any]) -> str:
    """How many more decisions a request that refused one takes, and what happens when they are refused too."""
    left = int(request.get("asks_left") or 1)
    given_up = "the question is cancelled" if request.get("type") == "elicitation" else "the call is taken as rejected"
    return f"{left} more {'answer' if left == 1 else 'answers'} taken; if {'it is' if left == 1 else 'all are'} refused, {given_up}"


def as_resume_value(request: dict[str, Any], thread_id: str, call_id: str, decision: dict[str, Any]) -> dict[str, Any]:
    """What an approve/reject decision resumes a waiting escalation with (not a tool approval)."""
    if request.get("type") == "elicitation":
        return _as_elicitation_answer(thread_id, call_id, decision)
    return _as_answer(decision)


def _as_elicitation_answer(thread_id: str, call_id: str, decision: dict[str, Any]) -> dict[str, Any]:
    """An approve (`answer`: the fields as a JSON object; none takes the schema's defaults) or a
    reject (decline), as the answer to an MCP server's question."""
    if decision.get("decision") != "approve":
        return {"action": "decline", "approver": decision.get("approver")}
    try:
        content = json.loads(decision["answer"]) if decision.get("answer") else {}
    except json.JSONDecodeError as error:
        content = error
    if not isinstance(content, dict):
        raise ApprovalRefused(thread_id, call_id, "the answer to a server's question must be a JSON object of its fields, "
                                                  "e.g. --answer '{\"colour\": \"green\"}'")
    return {"action": "accept", "content": content, "approver": decision.get("approver")}


def _as_answer(decision: dict[str, Any]) -> dict[str, Any]:
    """An approve/reject decision, as the answer to an escalation (question, extension, review, plan)."""
    answer = {key: decision[key] for key in ("answer", "grant", "message", "approver") if decision.get(key) is not None}
    if "answer" not in answer and "grant" not in answer:
        answer["accept"] = decision.get("decision") == "approve"
    return answer


def _expired_rejections(interrupts: Any) -> dict[str, Any]:
    """Pending approvals past their expiry, answered as rejections when a run is resumed."""
    now = time.time()
    return {
        item.id: {"decision": "reject", "message": "approval expired before a decision", "approver": approvals.EXPIRY_APPROVER}
        for item in interrupts
        if isinstance(item.value, dict) and item.value.get("expires_at") is not None and item.value["expires_at"] < now
    }


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT}
