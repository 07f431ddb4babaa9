"""store: typed reads and writes of boundloop's own tables (runs, trace, payloads, ledger).

Owns the SQL and the row types. Never decides anything: when to write INTENT, what a status
means or how a payload is excerpted belongs to the tool gateway and the nodes.
"""

from __future__ import annotations

import hashlib
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from checkpoints.errors import LedgerConflict

LedgerStatus = Literal["INTENT", "COMPLETE", "ABORT"]
POINTER_PREFIX = "payload:"


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


@dataclass(frozen=True)
class TraceEvent:
    id: int
    """Orders the events of a run."""
    thread_id: str
    at: datetime
    kind: str
    node: str | None
    data: Any


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
GET_RUN = "SELECT * FROM boundloop_runs WHERE thread_id = %s"
LIST_RUNS = "SELECT * FROM boundloop_runs ORDER BY created_at DESC, thread_id LIMIT %s"
APPEND_TRACE = """
INSERT INTO boundloop_trace (thread_id, kind, node, data) VALUES (%s, %s, %s, %s) RETURNING id"""
READ_TRACE = "SELECT * FROM boundloop_trace WHERE thread_id = %s ORDER BY id"
PUT_PAYLOAD = """
INSERT INTO boundloop_payloads (thread_id, call_id, sha256, chars, body)
VALUES (%s, %s, %s, %s, %s) RETURNING id"""
GET_PAYLOAD = "SELECT * FROM boundloop_payloads WHERE id = %s"
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
    params = dict(thread_id=thread_id, goal=goal, profile=profile, status=status,
                  task_hash=task_hash, result=_json(result), error=error)
    return Run(**await _one(pool, UPSERT_RUN, params))


async def get_run(pool: AsyncConnectionPool, thread_id: str) -> Run | None:
    row = await _maybe_one(pool, GET_RUN, (thread_id,))
    return None if row is None else Run(**row)


async def list_runs(pool: AsyncConnectionPool, limit: int = 20) -> list[Run]:
    """Newest first."""
    return [Run(**row) for row in await _all(pool, LIST_RUNS, (limit,))]


# -- trace -----------------------------------------------------------------------------------


async def append_trace(
    pool: AsyncConnectionPool, thread_id: str, kind: str, *, node: str | None = None,
    data: Any = None,
) -> int:
    """Append one event; return its id."""
    params = (thread_id, kind, node, Jsonb({} if data is None else data))
    row = await _one(pool, APPEND_TRACE, params)
    return row["id"]


async def read_trace(pool: AsyncConnectionPool, thread_id: str) -> list[TraceEvent]:
    """The run's events in the order they were appended."""
    return [TraceEvent(**row) for row in await _all(pool, READ_TRACE, (thread_id,))]


# -- payloads --------------------------------------------------------------------------------


async def put_payload(pool: AsyncConnectionPool, thread_id: str, call_id: str, body: str) -> str:
    """Store a full tool payload; return the pointer the state keeps."""
    digest = hashlib.sha256(body.encode()).hexdigest()
    row = await _one(pool, PUT_PAYLOAD, (thread_id, call_id, digest, len(body), body))
    return f"{POINTER_PREFIX}{row['id']}"


async def get_payload(pool: AsyncConnectionPool, pointer: str) -> Payload | None:
    """The payload `pointer` names, or None when it is not stored (here)."""
    row = await _maybe_one(pool, GET_PAYLOAD, (_payload_id(pointer),))
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
    params = dict(key=idempotency_key, thread_id=thread_id, call_id=call_id, step_id=step_id, tool=tool, server=server, args_hash=args_hash)
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


async def get_ledger_entry(pool: AsyncConnectionPool, idempotency_key: str) -> LedgerEntry | None:
    row = await _maybe_one(pool, GET_LEDGER_ENTRY, (idempotency_key,))
    return None if row is None else LedgerEntry(**row)


async def run_ledger(pool: AsyncConnectionPool, thread_id: str) -> list[LedgerEntry]:
    """Every ledger entry of a run, in the order the calls were first intended."""
    return [LedgerEntry(**row) for row in await _all(pool, RUN_LEDGER, (thread_id,))]


async def _write_outcome(
    pool: AsyncConnectionPool, key: str, status: LedgerStatus, *, result: Any, error: str | None
) -> LedgerEntry:
    row = await _maybe_one(pool, WRITE_OUTCOME, (status, _json(result), error, key))
    if row is None:
        current = await get_ledger_entry(pool, key)
        raise LedgerConflict(key, None if current is None else current.status, status)
    return LedgerEntry(**row)


# -- plumbing --------------------------------------------------------------------------------


def _json(value: Any) -> Jsonb | None:
    """SQL NULL for None; JSON for everything else."""
    return None if value is None else Jsonb(value)


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
