"""checkpoints: boundloop's PostgreSQL — which database, the embedded local cluster, the pool,
LangGraph's checkpointer on it, and our own tables (runs, trace, payloads, ledger, approvals).

    url = await asyncio.to_thread(database_url)      # env var, or the embedded cluster
    async with await open_pool(url) as pool:
        await migrate(pool)
        await upsert_run(pool, thread_id="t-1", goal="...", profile="research", status="plan",
                         task_hash="...")
    async with postgres_saver(url) as saver:
        graph = builder.compile(checkpointer=saver)
"""

from boundloop.checkpoints.cluster import ClusterStatus, LocalCluster, default_data_dir, state_dir
from boundloop.checkpoints.errors import (
    CheckpointsError,
    ClusterStartFailed,
    ClusterStopFailed,
    DatabaseUnavailable,
    LedgerConflict,
    PostgresNotInstalled,
    RunActiveElsewhere,
)
from boundloop.checkpoints.lease import LeaseHolder
from boundloop.checkpoints.pool import database_url, masked, open_pool
from boundloop.checkpoints.saver import postgres_saver
from boundloop.checkpoints.schema import MIGRATIONS, migrate
from boundloop.checkpoints.store import (
    LedgerEntry,
    LedgerStatus,
    Payload,
    Run,
    TraceEvent,
    append_trace,
    get_ledger_entry,
    get_payload,
    get_run,
    list_runs,
    put_payload,
    read_trace,
    upsert_run,
    write_abort,
    write_complete,
    write_intent,
)

__all__ = [
    "MIGRATIONS",
    "CheckpointsError",
    "ClusterStartFailed",
    "ClusterStatus",
    "ClusterStopFailed",
    "DatabaseUnavailable",
    "LeaseHolder",
    "LedgerConflict",
    "LedgerEntry",
    "LedgerStatus",
    "LocalCluster",
    "Payload",
    "PostgresNotInstalled",
    "RunActiveElsewhere",
    "Run",
    "TraceEvent",
    "append_trace",
    "database_url",
    "default_data_dir",
    "state_dir",
    "get_ledger_entry",
    "get_payload",
    "get_run",
    "list_runs",
    "masked",
    "migrate",
    "open_pool",
    "postgres_saver",
    "put_payload",
    "read_trace",
    "upsert_run",
    "write_abort",
    "write_complete",
    "write_intent",
]
