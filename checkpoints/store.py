"""store: typed reads and writes of boundloop's own tables (runs, trace, payloads, ledger).

Owns the SQL and the row types. Never decides anything: when to write INTENT, what a status
means or how a payload is excerpted belongs to the tool gateway and the nodes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.errors import LedgerConflict

LedgerStatus = Literal["INTENT", "COMPLETE", "ABORT"]
POINTER_PREFIX = "payload:"
RUNNING, WAITING, STOPPED = "running", "waiting", "stopped"
"""Registry statuses besides the terminal codes. `running` is stored while a process drives the
run, but read back as `running` only while a process holds the run's lease (checkpoints/lease.py);
a run whose driver died without a word (a kill, a crash, a lost database) reads as `stopped`."""
DIED_SILENTLY = "the process driving it ended without recording why (killed, crashed or cut off from the database)"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""What PostgreSQL text and jsonb refuse: NUL, and lone surrogates (not valid UTF-8)."""


@dataclass(frozen=True)
class Run:
    thread_id: str
    goal: str
    profile: str
    status: str
    """A phase while the run is live, then its terminal code."""
    task_hash: str
    created_at: datetime
    updated_at: datetime
    result: Any
    """The terminal artifact as JSON; None until the run ends."""
    error: str | None
    """Why a `stopped` run stopped."""
    detail: str | None = None
    """What a `waiting` run waits for; why a `stopped` one stopped."""
    closed_at: datetime | None = None
    """When the run ended for good; its trace is read-only from then on."""


@dataclass(frozen=True)
class TraceEvent:
    id: int
    """Orders the events of a run."""
    thread_id: str
    at: datetime
    kind: str
    node: str | None
    data: Any
    prev_hash: str | None = None
    """The hash of the event before it in the run's chain (None for the first)."""
    hash: str | None = None
    """SHA-256 over `prev_hash` and this event's content (None: written before the trace was chained)."""


@dataclass(frozen=True)
class Payload:
    pointer: str
    thread_id: str
    call_id: str
    sha256: str
    """Hex SHA-256 of `body` as UTF-8."""
    chars: int
    body: str
    created_at: datetime


@dataclass(frozen=True)
class LedgerEntry:
    idempotency_key: str
    thread_id: str
    call_id: str
    step_id: str | None
    tool: str
    server: str
    args_hash: str
    status: LedgerStatus
    result: Any
    error: str | None
    created_at: datetime
    updated_at: datetime


UPSERT_RUN = """
INSERT INTO boundloop_runs (thread_id, goal, profile, status, task_hash, result, error)
VALUES (%(thread_id)s, %(goal)s, %(profile)s, %(status)s, %(task_hash)s, %(result)s, %(error)s)
ON CONFLICT (thread_id) DO UPDATE SET
  goal = EXCLUDED.goal, profile = EXCLUDED.profile, status = EXCLUDED.status,
  task_hash = EXCLUDED.task_hash, result = EXCLUDED.result, error = EXCLUDED.error,
  updated_at = now()
RETURNING *"""
SET_RUN_STATUS = """
UPDATE boundloop_runs SET status = %(status)s, result = %(result)s, error = %(error)s, updated_at = now()
WHERE thread_id = %(thread_id)s"""
CLOSE_RUN = "UPDATE boundloop_runs SET closed_at = now() WHERE thread_id = %s AND closed_at IS NULL"
# The lease is a session-level advisory lock on a bigint key: pg_locks shows it as classid (high
# 32 bits), objid (low 32 bits) and objsubid 1.
_READ_RUNS = """
WITH leased AS (
  SELECT r.*, EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::text::bigint << 32) | l.objid::text::bigint) = hashtextextended('boundloop-run:' || r.thread_id, 0)
  ) AS leased
  FROM boundloop_runs r {where})
SELECT thread_id, goal, profile, task_hash, created_at, updated_at, result, closed_at,
  CASE WHEN status = 'running' AND NOT leased THEN 'stopped' ELSE status END AS status,
  CASE WHEN status = 'running' AND NOT leased THEN coalesce(error, %(died)s) ELSE error END AS error,
  CASE WHEN status = 'waiting' THEN result ->> 'waiting_for'
       WHEN status = 'stopped' OR (status = 'running' AND NOT leased) THEN coalesce(error, %(died)s) END AS detail
FROM leased"""
GET_RUN = _READ_RUNS.format(where="WHERE r.thread_id = %(thread_id)s")
LIST_RUNS = _READ_RUNS.format(where="") + " ORDER BY created_at DESC, thread_id LIMIT %(limit)s OFFSET %(offset)s"
# The root a run already has, or this one: the insert and the read see the same snapshot.
LANGSMITH_ROOT = """
WITH new AS (
    INSERT INTO boundloop_langsmith_roots (thread_id, root_id, started_at) VALUES (%(thread_id)s, %(root_id)s, %(started_at)s)
    ON CONFLICT (thread_id) DO NOTHING RETURNING root_id, started_at, true AS created
)
SELECT * FROM new
UNION ALL SELECT root_id, started_at, false FROM boundloop_langsmith_roots WHERE thread_id = %(thread_id)s"""
APPEND_TRACE = """
INSERT INTO boundloop_trace (thread_id, kind, node, data) VALUES (%s, %s, %s, %s) RETURNING id"""
# Several events in one statement (one round trip), in the order given (rows: `event_rows`).
APPEND_EVENTS = """
INSERT INTO boundloop_trace (thread_id, kind, node, data)
SELECT e ->> 'thread_id', e ->> 'kind', e ->> 'node', e -> 'data'
FROM jsonb_array_elements(%s) WITH ORDINALITY AS events(e, n) ORDER BY n"""
READ_TRACE = "SELECT * FROM boundloop_trace WHERE thread_id = %s ORDER BY id"
TRACE_HEAD = "SELECT hash FROM boundloop_trace_heads WHERE thread_id = %s"
TRACE_CHAIN = """
SELECT id, prev_hash, hash, boundloop_trace_row_hash(prev_hash, thread_id, kind, node, data, at) AS recomputed
FROM boundloop_trace WHERE thread_id = %s ORDER BY id"""
PUT_PAYLOAD = """
INSERT INTO boundloop_payloads (thread_id, call_id, sha256, chars, body)
VALUES (%s, %s, %s, %s, %s) RETURNING id"""
GET_PAYLOAD = "SELECT * FROM boundloop_payloads WHERE id = %s"
GET_CALL_PAYLOAD = "SELECT * FROM boundloop_payloads WHERE thread_id = %s AND call_id = %s ORDER BY created_at DESC LIMIT 1"
# One round trip: the new INTENT row, or (the key was there) the row as it stood before.
WRITE_INTENT = """
WITH inserted AS (
  INSERT INTO boundloop_ledger
    (idempotency_key, thread_id, call_id, step_id, tool, server, args_hash, status)
  VALUES (%(key)s, %(thread_id)s, %(call_id)s, %(step_id)s, %(tool)s, %(server)s, %(args_hash)s, 'INTENT')
  ON CONFLICT (idempotency_key) DO NOTHING
  RETURNING *)
SELECT *, true AS fresh FROM inserted
UNION ALL
SELECT *, false AS fresh FROM boundloop_ledger WHERE idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM inserted)"""
WRITE_OUTCOME = """
UPDATE boundloop_ledger SET status = %s, result = %s, error = %s, updated_at = now()
WHERE idempotency_key = %s AND status = 'INTENT'
RETURNING *"""
MARK_INTENT = """
UPDATE boundloop_ledger SET result = %s, updated_at = now()
WHERE idempotency_key = %s AND status = 'INTENT'
RETURNING idempotency_key"""
GET_LEDGER_ENTRY = "SELECT * FROM boundloop_ledger WHERE idempotency_key = %s"
RUN_LEDGER = "SELECT * FROM boundloop_ledger WHERE thread_id = %s ORDER BY created_at, idempotency_key"


# -- runs ------------------------------------------------------------------------------------


async def upsert_run(
    pool: AsyncConnectionPool,
    *,
    thread_id: str,
    goal: str,
    profile: str,
    status: str,
    task_hash: str,
    result: Any = None,
    error: str | None = None,
) -> Run:
    """Register the run or update it in place (created_at is kept)."""
    params = dict(thread_id=thread_id, goal=storable(goal), profile=profile, status=status,
                  task_hash=task_hash, result=_json(result), error=storable(error))
    return Run(**await _one(pool, UPSERT_RUN, params))


async def set_run_status(pool: AsyncConnectionPool, thread_id: str, status: str, *, result: Any = None, error: str | None = None) -> None:
    """Move a registered run to `status` (running, waiting with what for in `result`, stopped with
    `error`, or a terminal code). A run not registered yet (stopped before intake) stays unlisted."""
    params = dict(thread_id=thread_id, status=status, result=_json(result), error=storable(error))
    async with pool.connection() as conn:
        await conn.execute(SET_RUN_STATUS, params)


async def close_run(pool: AsyncConnectionPool, thread_id: str) -> None:
    """The run ended for good (its final checkpoint is saved): its trace takes no more events."""
    async with pool.connection() as conn:
        await conn.execute(CLOSE_RUN, (thread_id,))


async def langsmith_root(pool: AsyncConnectionPool, thread_id: str, root_id: UUID, started_at: datetime) -> tuple[UUID, datetime, bool]:
    """The LangSmith root run of the run (id, start time), and whether this call created it: the
    first caller's `root_id` and `started_at` are kept."""
    row = await _one(pool, LANGSMITH_ROOT, {"thread_id": thread_id, "root_id": root_id, "started_at": started_at})
    return row["root_id"], row["started_at"], row["created"]


async def get_run(pool: AsyncConnectionPool, thread_id: str) -> Run | None:
    """The run as the registry tells it: `running` only while a process holds its lease."""
    row = await _maybe_one(pool, GET_RUN, {"thread_id": thread_id, "died": DIED_SILENTLY})
    return None if row is None else Run(**row)


async def list_runs(pool: AsyncConnectionPool, limit: int = 20, offset: int = 0) -> list[Run]:
    """Newest first, each as `get_run` tells it; `offset` newer ones skipped."""
    return [Run(**row) for row in await _all(pool, LIST_RUNS, {"limit": limit, "offset": offset, "died": DIED_SILENTLY})]


# -- trace -----------------------------------------------------------------------------------


async def append_trace(
    pool: AsyncConnectionPool, thread_id: str, kind: str, *, node: str | None = None,
    data: Any = None,
) -> int:
    """Append one event; return its id."""
    params = (thread_id, kind, node, _json({} if data is None else data))
    row = await _one(pool, APPEND_TRACE, params)
    return row["id"]


async def append_events(pool: AsyncConnectionPool, thread_id: str, events: list[tuple[str, str | None, Any]]) -> None:
    """Append (kind, node, data) events in one round trip, in order."""
    async with pool.connection() as conn:
        await conn.execute(APPEND_EVENTS, (event_rows([(thread_id, kind, node, data) for kind, node, data in events]),))


def event_rows(events: list[tuple[str, str, str | None, Any]]) -> Jsonb | None:
    """(thread id, kind, node, data) events as the one parameter of APPEND_EVENTS."""
    return _json([{"thread_id": thread_id, "kind": kind, "node": node, "data": {} if data is None else data}
                  for thread_id, kind, node, data in events])


async def read_trace(pool: AsyncConnectionPool, thread_id: str) -> list[TraceEvent]:
    """The run's events in the order they were appended."""
    return [TraceEvent(**row) for row in await _all(pool, READ_TRACE, (thread_id,))]


async def trace_head(pool: AsyncConnectionPool, thread_id: str) -> str | None:
    """The hash of the run's newest trace row: kept outside the database, it shows later whether
    the chain up to it was rewritten, which the database's owner could otherwise do consistently."""
    row = await _one(pool, TRACE_HEAD, (thread_id,))
    return row["hash"] if row else None


async def trace_chain_problems(pool: AsyncConnectionPool, thread_id: str, expected_head: str | None = None) -> list[str]:
    """Where the run's hash chain is broken: a row whose content no longer matches its hash, a row
    whose predecessor is gone, two rows after one, or a row outside the chain after it began. Rows
    written before the trace was chained (no hash) are accepted only before the chain's first row.
    With `expected_head` (a `trace_head` kept elsewhere), a chain that no longer holds it was rewritten."""
    rows = await _all(pool, TRACE_CHAIN, (thread_id,))
    chained = [row for row in rows if row["hash"] is not None]
    if expected_head is not None and expected_head not in {row["hash"] for row in chained}:
        rewritten = [f"the trace no longer holds the head {expected_head[:16]}… recorded earlier: the events up to it were rewritten or removed"]
    else:
        rewritten = []
    if not chained:
        return rewritten
    problems = [f"event {row['id']}: not in the hash chain (written with the trace's triggers stepped around)"
                for row in rows if row["hash"] is None and row["id"] > chained[0]["id"]]
    hashes = {row["hash"] for row in chained}
    after: dict[str | None, list[int]] = {}
    for row in chained:
        if row["hash"] != row["recomputed"]:
            problems.append(f"event {row['id']}: its content no longer matches its hash (changed after it was written)")
        if row["prev_hash"] is not None and row["prev_hash"] not in hashes:
            problems.append(f"event {row['id']}: the event before it in the hash chain is missing (deleted or changed)")
        after.setdefault(row["prev_hash"], []).append(row["id"])
    problems += [f"events {', '.join(map(str, ids))} all follow {'the start' if prev is None else 'one event'}: the hash chain forks"
                 for prev, ids in after.items() if len(ids) > 1]
    return problems + rewritten


# -- payloads --------------------------------------------------------------------------------


async def put_payload(pool: AsyncConnectionPool, thread_id: str, call_id: str, body: str) -> str:
    """Store a full tool payload; return the pointer the state keeps."""
    row = await _one(pool, PUT_PAYLOAD, _payload_row(thread_id, call_id, body))
    return f"{POINTER_PREFIX}{row['id']}"


async def put_payloads(pool: AsyncConnectionPool, thread_id: str, bodies: Sequence[tuple[str, str]]) -> None:
    """Store (call id, body) payloads, each found later by its call id (`get_call_payload`): in one
    transaction, sent as one batch, so all of them are stored or, when the write fails, none."""
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.executemany(PUT_PAYLOAD, [_payload_row(thread_id, call_id, body) for call_id, body in bodies])


def _payload_row(thread_id: str, call_id: str, body: str) -> tuple[str, str, str, int, str]:
    """PUT_PAYLOAD's parameters: the hash and size are of the body as given, before `storable`."""
    return thread_id, call_id, hashlib.sha256(body.encode()).hexdigest(), len(body), storable(body)


async def get_payload(pool: AsyncConnectionPool, pointer: str) -> Payload | None:
    """The payload `pointer` names, or None when it is not stored (here)."""
    row = await _maybe_one(pool, GET_PAYLOAD, (_payload_id(pointer),))
    if row is None:
        return None
    row["pointer"] = f"{POINTER_PREFIX}{row.pop('id')}"
    return Payload(**row)


async def get_call_payload(pool: AsyncConnectionPool, thread_id: str, call_id: str) -> Payload | None:
    """The payload stored last for `call_id` of run `thread_id`, or None."""
    row = await _maybe_one(pool, GET_CALL_PAYLOAD, (thread_id, call_id))
    if row is None:
        return None
    row["pointer"] = f"{POINTER_PREFIX}{row.pop('id')}"
    return Payload(**row)


def _payload_id(pointer: str) -> UUID:
    if pointer.startswith(POINTER_PREFIX):
        with suppress(ValueError):
            return UUID(pointer.removeprefix(POINTER_PREFIX))
    raise ValueError(
        f"payload pointer {pointer!r} is malformed; expected '{POINTER_PREFIX}<uuid>' as "
        "returned by put_payload"
    )


# -- ledger ----------------------------------------------------------------------------------


async def write_intent(
    pool: AsyncConnectionPool,
    *,
    idempotency_key: str,
    thread_id: str,
    call_id: str,
    step_id: str | None,
    tool: str,
    server: str,
    args_hash: str,
) -> LedgerEntry:
    """Record the intent to call; return the entry as stored.

    Idempotent: when the key is already there (a resumed run), the existing entry comes back
    unchanged, so the caller sees a COMPLETE outcome instead of calling again.
    """
    entry, _ = await claim_intent(pool, idempotency_key=idempotency_key, thread_id=thread_id, call_id=call_id,
                                  step_id=step_id, tool=tool, server=server, args_hash=args_hash)
    return entry


async def claim_intent(
    pool: AsyncConnectionPool, *, idempotency_key: str, thread_id: str, call_id: str, step_id: str | None,
    tool: str, server: str, args_hash: str,
) -> tuple[LedgerEntry, bool]:
    """`write_intent` in one round trip, also saying whether this call created the entry (True)
    or found one from before a crash (False)."""
    params = dict(key=idempotency_key, thread_id=thread_id, call_id=call_id, step_id=step_id, tool=storable(tool), server=storable(server),
                  args_hash=args_hash)
    row = await _one(pool, WRITE_INTENT, params)
    fresh = row.pop("fresh")
    return LedgerEntry(**row), fresh


async def write_complete(
    pool: AsyncConnectionPool, idempotency_key: str, result: Any
) -> LedgerEntry:
    """INTENT → COMPLETE with the call's result; `LedgerConflict` from any other state."""
    return await _write_outcome(pool, idempotency_key, "COMPLETE", result=result, error=None)


async def write_abort(pool: AsyncConnectionPool, idempotency_key: str, error: str) -> LedgerEntry:
    """INTENT → ABORT with the reason; `LedgerConflict` from any other state."""
    return await _write_outcome(pool, idempotency_key, "ABORT", result=None, error=error)


async def mark_intent(pool: AsyncConnectionPool, idempotency_key: str, mark: dict[str, Any] | None) -> None:
    """Note why an INTENT has no outcome yet (None clears it); `LedgerConflict` from any other state."""
    row = await _maybe_one(pool, MARK_INTENT, (_json(mark), idempotency_key))
    if row is None:
        current = await get_ledger_entry(pool, idempotency_key)
        raise LedgerConflict(idempotency_key, None if current is None else current.status, "INTENT")


async def get_ledger_entry(pool: AsyncConnectionPool, idempotency_key: str) -> LedgerEntry | None:
    row = await _maybe_one(pool, GET_LEDGER_ENTRY, (idempotency_key,))
    return None if row is None else LedgerEntry(**row)


async def run_ledger(pool: AsyncConnectionPool, thread_id: str) -> list[LedgerEntry]:
    """Every ledger entry of a run, in the order the calls were first intended."""
    return [LedgerEntry(**row) for row in await _all(pool, RUN_LEDGER, (thread_id,))]


async def _write_outcome(
    pool: AsyncConnectionPool, key: str, status: LedgerStatus, *, result: Any, error: str | None
) -> LedgerEntry:
    row = await _maybe_one(pool, WRITE_OUTCOME, (status, _json(result), storable(error), key))
    if row is None:
        current = await get_ledger_entry(pool, key)
        raise LedgerConflict(key, None if current is None else current.status, status)
    return LedgerEntry(**row)


# -- plumbing --------------------------------------------------------------------------------


def storable(value: Any) -> Any:
    """`value` with every string in it made acceptable to PostgreSQL text and jsonb: NUL and lone
    surrogates become U+FFFD. What a model or a server sends must never make a write fail (a run
    whose every retry fails on the same write is stuck for good); the payload's sha256 is taken
    before, so the stored text still says it was altered."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(item) for item in value]
    return value


def _json(value: Any) -> Jsonb | None:
    """SQL NULL for None; JSON for everything else, made storable."""
    return None if value is None else Jsonb(storable(value))


async def _maybe_one(pool: AsyncConnectionPool, sql: str, params: Any) -> dict[str, Any] | None:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()


async def _one(pool: AsyncConnectionPool, sql: str, params: Any) -> dict[str, Any]:
    row = await _maybe_one(pool, sql, params)
    assert row is not None, sql  # only used for statements that always return a row
    return row


async def _all(pool: AsyncConnectionPool, sql: str, params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchall()
