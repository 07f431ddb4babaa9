"""schema: boundloop's own tables, next to LangGraph's checkpoint tables in the same database.

Owns `MIGRATIONS` and `migrate`. Never reads or writes rows (`store`).
"""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

MIGRATIONS = [  # position = version; append, never edit or reorder
    "CREATE TABLE IF NOT EXISTS boundloop_migrations ("
    " v INTEGER PRIMARY KEY,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    # The run registry the CLI lists. status: a phase while running, then the terminal code.
    "CREATE TABLE boundloop_runs ("
    " thread_id TEXT PRIMARY KEY,"
    " goal TEXT NOT NULL,"
    " profile TEXT NOT NULL,"
    " status TEXT NOT NULL,"
    " task_hash TEXT NOT NULL,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " result JSONB,"
    " error TEXT)",
    "CREATE INDEX boundloop_runs_created_at_idx ON boundloop_runs (created_at DESC)",
    # A resubmitted task is found by its hash, so a committed task returns its result without re-running.
    "CREATE INDEX boundloop_runs_task_hash_idx ON boundloop_runs (task_hash)",
    # Append-only; id orders the events of a run.
    "CREATE TABLE boundloop_trace ("
    " id BIGSERIAL PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),"
    " kind TEXT NOT NULL,"
    " node TEXT,"
    " data JSONB NOT NULL DEFAULT '{}')",
    "CREATE INDEX boundloop_trace_thread_idx ON boundloop_trace (thread_id, id)",
    # Full tool payloads; the checkpointed state keeps only a pointer, the hash and an excerpt.
    "CREATE TABLE boundloop_payloads ("
    " id UUID PRIMARY KEY DEFAULT gen_random_uuid(),"
    " thread_id TEXT NOT NULL,"
    " call_id TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " chars INTEGER NOT NULL,"
    " body TEXT NOT NULL,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE INDEX boundloop_payloads_thread_idx ON boundloop_payloads (thread_id)",
    # Write-ahead ledger: INTENT before a side-effecting call, then exactly one outcome.
    "CREATE TABLE boundloop_ledger ("
    " idempotency_key TEXT PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " call_id TEXT NOT NULL,"
    " step_id TEXT,"
    " tool TEXT NOT NULL,"
    " server TEXT NOT NULL,"
    " args_hash TEXT NOT NULL,"
    " status TEXT NOT NULL CHECK (status IN ('INTENT', 'COMPLETE', 'ABORT')),"
    " result JSONB,"
    " error TEXT,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " updated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE INDEX boundloop_ledger_thread_idx ON boundloop_ledger (thread_id)",
    # One row per approval request, bound to the exact call; single use (used_at).
    "CREATE TABLE boundloop_approvals ("
    " id UUID PRIMARY KEY DEFAULT gen_random_uuid(),"
    " thread_id TEXT NOT NULL,"
    " call_id TEXT NOT NULL,"
    " tool TEXT NOT NULL,"
    " args_hash TEXT NOT NULL,"
    " interrupt_id TEXT,"
    " decision TEXT CHECK (decision IN ('approve', 'edit', 'reject', 'respond')),"
    " approver TEXT,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " decided_at TIMESTAMPTZ,"
    " expires_at TIMESTAMPTZ,"
    " used_at TIMESTAMPTZ,"
    " payload JSONB)",
    "CREATE INDEX boundloop_approvals_thread_idx ON boundloop_approvals (thread_id, call_id)",
    "CREATE UNIQUE INDEX boundloop_approvals_call_key ON boundloop_approvals (thread_id, call_id)",
    # A run is closed when it ended for good (finalize with any code but a reopenable one).
    "ALTER TABLE boundloop_runs ADD COLUMN closed_at TIMESTAMPTZ",
    # The trace is append-only while the run is open and read-only once it closed: rows are never
    # updated or deleted, and nothing is appended to a closed run. Only the database owner can
    # step around this (e.g. session_replication_role = replica), which `boundloop replay` catches.
    "CREATE FUNCTION boundloop_trace_guard() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " IF TG_OP <> 'INSERT' THEN"
    "  RAISE EXCEPTION 'boundloop_trace is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';"
    " END IF;"
    " IF EXISTS (SELECT 1 FROM boundloop_runs WHERE thread_id = NEW.thread_id AND closed_at IS NOT NULL) THEN"
    "  RAISE EXCEPTION 'run % is closed: its trace is read-only', NEW.thread_id USING ERRCODE = 'insufficient_privilege';"
    " END IF;"
    " RETURN NEW; END $$",
    "CREATE TRIGGER boundloop_trace_append_only BEFORE INSERT OR UPDATE OR DELETE ON boundloop_trace"
    " FOR EACH ROW EXECUTE FUNCTION boundloop_trace_guard()",
    "CREATE TRIGGER boundloop_trace_no_truncate BEFORE TRUNCATE ON boundloop_trace"
    " FOR EACH STATEMENT EXECUTE FUNCTION boundloop_trace_guard()",
    # The LangSmith root run of a run (graph/trace/langsmith.py): every drive of the run, in any
    # process, nests under it, so a resumed run stays one tree.
    "CREATE TABLE boundloop_langsmith_roots ("
    " thread_id TEXT PRIMARY KEY,"
    " root_id UUID NOT NULL,"
    " started_at TIMESTAMPTZ NOT NULL)",
    # Each trace row is chained to the run's previous row by hash (prev_hash → hash), computed in
    # the insert trigger from the run's head row, locked, so rows appended concurrently still form
    # one chain. An edit, deletion or insertion made with the triggers stepped around breaks the
    # chain where it happened, and `boundloop replay` says which row (store.trace_chain_problems).
    "ALTER TABLE boundloop_trace ADD COLUMN prev_hash TEXT, ADD COLUMN hash TEXT",
    "CREATE TABLE boundloop_trace_heads (thread_id TEXT PRIMARY KEY, hash TEXT)",
    "CREATE FUNCTION boundloop_trace_row_hash(prev TEXT, thread_id TEXT, kind TEXT, node TEXT, data JSONB, at TIMESTAMPTZ)"
    " RETURNS TEXT LANGUAGE sql STABLE AS $$ SELECT encode(sha256(convert_to(concat_ws(chr(31), coalesce(prev, ''), thread_id, kind,"
    " coalesce(node, ''), data::text, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')), 'UTF8')), 'hex') $$",
    "CREATE OR REPLACE FUNCTION boundloop_trace_guard() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " IF TG_OP <> 'INSERT' THEN"
    "  RAISE EXCEPTION 'boundloop_trace is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';"
    " END IF;"
    " IF EXISTS (SELECT 1 FROM boundloop_runs WHERE thread_id = NEW.thread_id AND closed_at IS NOT NULL) THEN"
    "  RAISE EXCEPTION 'run % is closed: its trace is read-only', NEW.thread_id USING ERRCODE = 'insufficient_privilege';"
    " END IF;"
    " INSERT INTO boundloop_trace_heads (thread_id, hash) VALUES (NEW.thread_id, NULL) ON CONFLICT (thread_id) DO NOTHING;"
    " SELECT h.hash INTO NEW.prev_hash FROM boundloop_trace_heads h WHERE h.thread_id = NEW.thread_id FOR UPDATE;"
    " NEW.hash := boundloop_trace_row_hash(NEW.prev_hash, NEW.thread_id, NEW.kind, NEW.node, NEW.data, NEW.at);"
    " UPDATE boundloop_trace_heads SET hash = NEW.hash WHERE thread_id = NEW.thread_id;"
    " RETURN NEW; END $$",
    # One row per `boundloop eval` run of a suite: its metrics against the thresholds and each
    # scenario run (ending, node path, calls, tokens, wall), as the report and the console show them.
    "CREATE TABLE boundloop_eval_runs ("
    " id BIGSERIAL PRIMARY KEY,"
    " suite TEXT NOT NULL,"
    " quick BOOLEAN NOT NULL,"
    " started_at TIMESTAMPTZ NOT NULL,"
    " seconds DOUBLE PRECISION NOT NULL,"
    " passed BOOLEAN NOT NULL,"
    " report JSONB NOT NULL)",
    "CREATE INDEX boundloop_eval_runs_suite_idx ON boundloop_eval_runs (suite, quick, id DESC)",
    # The last tool listing of each set of trusted servers (tools/kept_listing.py), keyed by a hash
    # of their configs: a short run's first model request goes out while its servers start.
    "CREATE TABLE boundloop_tool_listings ("
    " servers_key TEXT PRIMARY KEY,"
    " pins JSONB NOT NULL,"
    " listed_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    # Write-ahead record of model calls (checkpoints/model_calls.py): INTENT with the call's reservation
    # before the request, ANSWERED with the reply's usage after it. `task` is the LangGraph task that
    # made the call, `execution` one run of that task: a task that runs again after a crash finds
    # the calls its earlier executions made and charges them.
    "CREATE TABLE boundloop_model_calls ("
    " id BIGSERIAL PRIMARY KEY,"
    " thread_id TEXT NOT NULL,"
    " task TEXT NOT NULL,"
    " execution TEXT NOT NULL,"
    " role TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " status TEXT NOT NULL CHECK (status IN ('INTENT', 'ANSWERED')),"
    " usage JSONB NOT NULL,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " updated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE INDEX boundloop_model_calls_task_idx ON boundloop_model_calls (thread_id, task)",
]

# Any constant works as long as nothing else in the database uses it: b"boundloo" as an int8.
_MIGRATION_LOCK = int.from_bytes(b"boundloo", "big")


async def migrate(pool: AsyncConnectionPool) -> int:
    """Apply the migrations this database lacks; return the schema version now in force.

    Idempotent, and safe under concurrent callers in any number of processes: one transaction
    under an advisory lock, so a second caller waits and then finds nothing left to do.
    """
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await cur.execute(MIGRATIONS[0])
        await cur.execute("SELECT max(v) AS v FROM boundloop_migrations")
        row = await cur.fetchone()
        current = -1 if row is None or row["v"] is None else row["v"]
        for version in range(current + 1, len(MIGRATIONS)):
            await cur.execute(MIGRATIONS[version])
            await cur.execute("INSERT INTO boundloop_migrations (v) VALUES (%s)", (version,))
    return max(current, len(MIGRATIONS) - 1)
