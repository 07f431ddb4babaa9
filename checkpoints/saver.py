"""saver: LangGraph's AsyncPostgresSaver on our pool, with its database prepared.

Owns the saver's setup (once, serialised across processes), the lock choice below,
`adelete_for_runs`, which the LangGraph server needs to cancel a run with `rollback` and which
langgraph-checkpoint-postgres 3.2.0 lacks, and the writing of each step's trace events in the
transaction that saves the step (checkpoints/pending_trace.py). Never opens a database it was not
given (`pool.database_url` decides which one).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import ERROR
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.pending_trace import Event, PendingTrace, TaskKey
from boundloop.checkpoints.pool import open_pool
from boundloop.checkpoints.schema import migrate
from boundloop.checkpoints.store import APPEND_EVENTS, event_rows

_SETUP_LOCK = int.from_bytes(b"bl-saver", "big")
_SETUP_POLL_S = 0.05
_COUNTER_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""A version's counter is base 62 in these digits, which are in ASCII order: counters of one width
compare as strings (as LangGraph compares versions) the way their numbers do."""
_COUNTER_WIDTH = 6
"""62^6: 5.7 * 10^10 steps of one thread (one step adds one)."""
_DECIMAL_WIDTH = 10
"""A counter this long or longer is decimal: the Postgres saver's (32 digits) or boundloop's before base 62 (10)."""
_VERSION_RANDOM_BYTES = 6
"""After the counter: 48 random bits, in 8 URL-safe base64 characters."""
_DELETE_FOR_RUNS = """
WITH doomed AS (
    DELETE FROM checkpoints WHERE metadata->>'run_id' = ANY(%s)
    RETURNING thread_id, checkpoint_ns, checkpoint_id
)
DELETE FROM checkpoint_writes AS w USING doomed AS d
WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns AND w.checkpoint_id = d.checkpoint_id
"""


T = TypeVar("T")
_SAVING_WITH: ContextVar[list[Event] | None] = ContextVar("boundloop_saving_with", default=None)
"""The trace events the save under way writes in its transaction (emptied once written)."""


def _number(counter: str) -> int:
    """The number a base-62 counter stands for ("" is 0)."""
    number = 0
    for digit in counter:
        number = number * 62 + _COUNTER_DIGITS.index(digit)
    return number


def _base62(number: int) -> str:
    digits = ""
    while number:
        number, digit = divmod(number, 62)
        digits = _COUNTER_DIGITS[digit] + digits
    return digits.rjust(_COUNTER_WIDTH, "0")


class BoundloopSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver that writes each step's trace events with the step, and can forget the
    checkpoints of given server runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending_trace = PendingTrace()
        self._trace_order: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def get_next_version(self, current: str | None, channel: None) -> str:
        """`<counter>.<random>`: 15 characters where the Postgres saver writes 50, and a checkpoint
        holds dozens of versions.

        The counter is fixed-width base 62, as LangGraph compares versions as strings (`>`, `max()`).
        A thread saved with decimal counters (the Postgres saver's 32 digits, boundloop's 10 before)
        keeps them, so an older boundloop can still continue a thread it started. A base-62 version
        given to a never-written channel of such a thread (a fork snapshots one) compares smaller
        than the thread's versions or, when greater, the thread goes on from it in base 62, above
        every decimal version it holds. The random part keeps a thread's branches apart (a fork, a
        rerun after a rollback), which write the same counters: a blob is keyed by its version and
        never overwritten. It comes from `secrets`, which no random.seed() repeats.
        """
        counter = "" if current is None else str(current).split(".")[0]
        if len(counter) >= _DECIMAL_WIDTH:
            following = f"{int(counter) + 1:0{len(counter)}}"
        else:
            following = _base62(_number(counter) + 1)
        return f"{following}.{secrets.token_urlsafe(_VERSION_RANDOM_BYTES)}"

    def hold_trace(self, key: TaskKey, events: list[Event]) -> None:
        """Write `events` with the saved result of the task `key` names (none if the task fails)."""
        self.pending_trace.hold(key, events)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        key = TaskKey.of_writes(config["configurable"], task_id)
        if any(channel == ERROR for channel, _ in writes):
            self.pending_trace.drop(key)  # the task runs again, and holds its events again
            await super().aput_writes(config, writes, task_id, task_path)
            return
        await self._saving_with(key.thread_id, self.pending_trace.take(key), super().aput_writes(config, writes, task_id, task_path))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        events = self.pending_trace.take_through(thread_id, configurable.get("checkpoint_ns", ""), configurable.get("checkpoint_id"))
        return await self._saving_with(thread_id, events, super().aput(config, checkpoint, metadata, new_versions), after_earlier=True)

    async def _saving_with(self, thread_id: str, events: list[Event], save: Awaitable[T], *, after_earlier: bool = False) -> T:
        """Run `save` with `events` in its transaction. LangGraph saves a task's writes in the
        background, without waiting for them before the next step (durability "sync" waits for the
        checkpoint only), so a thread's saves carrying events run one at a time, in the order they
        were asked for (no await before the FIFO lock): the trace's order is the steps' order. A
        checkpoint (`after_earlier`) also waits for the event saves asked for before it: it holds
        their steps' results, so it must not exist without their events."""
        if not events and not (after_earlier and thread_id in self._trace_order):
            return await save
        lock, users = self._trace_order.setdefault(thread_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                token = _SAVING_WITH.set(events)
                try:
                    saved = await save
                finally:
                    _SAVING_WITH.reset(token)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._trace_order[thread_id]
        if events:
            raise RuntimeError("the Postgres saver saved without its cursor: a step's trace events were not written "
                               "(langgraph-checkpoint-postgres changed; see checkpoints/saver.py _cursor)")
        return saved

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the runs created (their metadata names the run) and the writes
        made against them; the thread's state goes back to where it was before them.

        Left in place: blobs (content-addressed by version, shared with earlier checkpoints), and
        the writes a resumed run made against the checkpoint it resumed from — LangGraph stores
        no run id on a write (graph/README.md, "The LangGraph server and Studio").
        """
        async with self._cursor() as cur:
            await cur.execute(_DELETE_FOR_RUNS, ([str(run_id) for run_id in run_ids],))

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """The parent's cursor; a save that carries trace events INSERTs them after its own
        statements, in the same transaction: the pipeline's (statements up to its Sync run as one
        implicit transaction, and the INSERT is one more result in the same batch, not a round trip of
        its own), else an explicit one."""
        events = _SAVING_WITH.get()
        if not events:
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        async with super()._cursor(pipeline=pipeline) as cur, (nullcontext() if pipeline else cur.connection.transaction()):
            yield cur
            await cur.execute(APPEND_EVENTS, (event_rows(events),))
            events.clear()


@asynccontextmanager
async def postgres_saver(
    url_or_pool: str | AsyncConnectionPool,
) -> AsyncIterator[BoundloopSaver]:
    """A saver on a database that has LangGraph's checkpoint tables and boundloop's own.

    Given a URL it opens (and finally closes) its own pool; a pool passed in stays open and
    must come from `open_pool` (setup needs autocommit connections).
    """
    if isinstance(url_or_pool, AsyncConnectionPool):
        yield await _prepared_saver(url_or_pool)
        return
    async with await open_pool(url_or_pool) as pool:
        yield await _prepared_saver(pool)


async def _prepared_saver(pool: AsyncConnectionPool) -> BoundloopSaver:
    async with pool.connection() as conn:
        await setup_exclusively(conn, _SETUP_LOCK, AsyncPostgresSaver(conn).setup)
    await migrate(pool)
    saver = BoundloopSaver(pool)
    # langgraph #7259: the saver holds one asyncio.Lock around every query, which serialises
    # concurrent runs even on a pool. The lock only guards a single shared connection; on a
    # pool each query takes its own connection, so we allow half the pool at once and leave the
    # other half to the ledger, trace and payload writes that share it.
    saver.lock = asyncio.Semaphore(max(1, pool.max_size // 2))  # type: ignore[assignment]
    return saver


async def setup_exclusively(conn: AsyncConnection, lock: int, setup: Callable[[], Awaitable[None]]) -> None:
    """Run a LangGraph `setup()` (the saver's, the store's) on `conn` while no other process
    holding advisory lock `lock` runs it.

    setup() is not safe for two first-time callers at once (both create the same tables).
    It runs CREATE INDEX CONCURRENTLY, which waits for every open transaction, so a caller
    blocked in pg_advisory_lock() would deadlock with it: waiters poll pg_try_advisory_lock
    in short transactions instead.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        while True:
            await cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (lock,))
            row = await cur.fetchone()
            if row is not None and row["locked"]:
                break
            await asyncio.sleep(_SETUP_POLL_S)
        try:
            await setup()
        finally:
            await cur.execute("SELECT pg_advisory_unlock(%s)", (lock,))
