"""approvals: the record of every approval request and decision, bound to the exact call.

A request is keyed by (run, call id) and carries the tool and the hash of the arguments it was
asked about. A decision is single use: it is accepted once, for that call and that hash, before
the request expires; a replay, a decision for another hash, or one for an unknown call is
refused with `ApprovalRefused`. A decision that arrives after the request expired is recorded as
what it counts as, a rejection (by `boundloop:expiry`, naming the late approver), never as the
approval it asked to be: the database's clock decides, in the same statement that uses the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.checkpoints.store import storable

REQUEST = """
INSERT INTO boundloop_approvals (thread_id, call_id, tool, args_hash, expires_at, payload)
VALUES (%(thread_id)s, %(call_id)s, %(tool)s, %(args_hash)s, to_timestamp(%(expires_at)s), %(payload)s)
ON CONFLICT (thread_id, call_id) DO NOTHING"""
PENDING = """
SELECT * FROM boundloop_approvals
WHERE decision IS NULL AND (expires_at IS NULL OR expires_at >= now())
  AND (%(thread_id)s::text IS NULL OR thread_id = %(thread_id)s)
ORDER BY created_at"""
GET = "SELECT * FROM boundloop_approvals WHERE thread_id = %s AND call_id = %s"
HISTORY = "SELECT * FROM boundloop_approvals WHERE thread_id = %s ORDER BY created_at, call_id"
QUESTIONS_ASKED = "SELECT EXISTS (SELECT 1 FROM boundloop_approvals WHERE thread_id = %s AND tool = %s) AS asked"
QUESTION_TOOL = "elicitation"
"""The `tool` of the row of a server's question to the human (graph/calls/elicitation.py), not a call's approval."""
EXPIRY_APPROVER = "boundloop:expiry"
DECIDE = """
UPDATE boundloop_approvals
SET decision = CASE WHEN expires_at < now() THEN 'reject' ELSE %(decision)s END,
    approver = CASE WHEN expires_at < now() THEN %(expired_by)s ELSE %(approver)s END,
    decided_at = now(), used_at = now(), interrupt_id = %(interrupt_id)s
WHERE thread_id = %(thread_id)s AND call_id = %(call_id)s AND decision IS NULL AND args_hash = %(args_hash)s
RETURNING *"""


@dataclass(frozen=True)
class Approval:
    id: Any
    thread_id: str
    call_id: str
    tool: str
    args_hash: str
    interrupt_id: str | None
    decision: str | None
    approver: str | None
    created_at: datetime
    decided_at: datetime | None
    expires_at: datetime | None
    used_at: datetime | None
    payload: Any


def expired(recorded: Approval) -> bool:
    """The request was used after its expiry, so `decide` recorded it as a rejection."""
    return recorded.expires_at is not None and recorded.decided_at is not None and recorded.decided_at > recorded.expires_at


async def request_approval(
    pool: AsyncConnectionPool, *, thread_id: str, call_id: str, tool: str, args_hash: str, expires_at: float | None, payload: Any
) -> None:
    """Record that a call waits for a human. Idempotent: a re-run node asks again harmlessly."""
    async with pool.connection() as conn:
        await conn.execute(REQUEST, {"thread_id": thread_id, "call_id": call_id, "tool": storable(tool), "args_hash": args_hash,
                                     "expires_at": expires_at, "payload": Jsonb(storable(payload))})


async def pending_approvals(pool: AsyncConnectionPool, thread_id: str | None = None) -> list[Approval]:
    """Requests a human can still decide (no decision, not expired), oldest first, across all runs
    unless one is named. An expired one counts as rejected when its run goes on."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(PENDING, {"thread_id": thread_id})).fetchall()
    return [Approval(**row) for row in rows]


async def history(pool: AsyncConnectionPool, thread_id: str) -> list[Approval]:
    """Every request of one run, decided or not, oldest first."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(HISTORY, (thread_id,))).fetchall()
    return [Approval(**row) for row in rows]


async def questions_asked(pool: AsyncConnectionPool, thread_id: str) -> bool:
    """Whether any server's question (elicitation, graph/calls/elicitation.py) was ever recorded for the run."""
    async with pool.connection() as conn:
        row = await (await conn.execute(QUESTIONS_ASKED, (thread_id, QUESTION_TOOL))).fetchone()
    return bool(row and row["asked"])


async def get_approval(pool: AsyncConnectionPool, thread_id: str, call_id: str) -> Approval | None:
    async with pool.connection() as conn:
        row = await (await conn.execute(GET, (thread_id, call_id))).fetchone()
    return None if row is None else Approval(**row)


async def decide(
    pool: AsyncConnectionPool, *, thread_id: str, call_id: str, args_hash: str, decision: str, approver: str | None, interrupt_id: str | None
) -> Approval:
    """Use the request once. Refuses an unknown call, a decided one (replay), another hash (tampering).
    Past its expiry the request is used as a rejection, whatever `decision` says."""
    late = EXPIRY_APPROVER if approver == EXPIRY_APPROVER else f"{EXPIRY_APPROVER} (late {decision} by {approver or 'unknown'})"
    async with pool.connection() as conn:
        row = await (await conn.execute(DECIDE, {"thread_id": thread_id, "call_id": call_id, "args_hash": args_hash, "decision": decision,
                                                  "approver": approver, "interrupt_id": interrupt_id, "expired_by": late})).fetchone()
    if row is not None:
        return Approval(**row)
    current = await get_approval(pool, thread_id, call_id)
    if current is None:
        raise ApprovalRefused(thread_id, call_id, "no approval was requested for this call")
    if current.decision is not None:
        raise ApprovalRefused(thread_id, call_id, f"it was already decided ({current.decision} by {current.approver or 'unknown'}); a decision is single use")
    raise ApprovalRefused(thread_id, call_id, "the decision is for other arguments than the ones the request was made for (argument hash mismatch)")
