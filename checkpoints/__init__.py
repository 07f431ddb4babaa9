"""checkpoints: boundloop's PostgreSQL — which database, the embedded local cluster, the pool,
LangGraph's checkpointer on it, and our own tables (runs, trace, payloads, ledger, approvals).

    url = await asyncio.to_thread(database_url)      # env var, or the embedded cluster
    async with await open_pool(url) as pool:
        await migrate(pool)
        await upsert_run(pool, thread_id="t-1", goal="...", profile="research", status="plan",
                         task_hash="...")
    async with postgres_saver(url) as saver:
        graph = builder.compile(checkpointer=saver)

The names below load on first use, so a caller that needs one submodule (the errors, the cluster)
does not load LangGraph's checkpointer with it.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_EXPORTS = {
    "MIGRATIONS": "boundloop.checkpoints.schema",
    "CheckpointsError": "boundloop.checkpoints.errors",
    "ClusterStartFailed": "boundloop.checkpoints.errors",
    "ClusterStatus": "boundloop.checkpoints.cluster",
    "ClusterStopFailed": "boundloop.checkpoints.errors",
    "DatabaseUnavailable": "boundloop.checkpoints.errors",
    "LeaseHolder": "boundloop.checkpoints.lease",
    "LedgerConflict": "boundloop.checkpoints.errors",
    "LedgerEntry": "boundloop.checkpoints.store",
    "LedgerStatus": "boundloop.checkpoints.store",
    "LocalCluster": "boundloop.checkpoints.cluster",
    "Payload": "boundloop.checkpoints.store",
    "PostgresNotInstalled": "boundloop.checkpoints.errors",
    "RunActiveElsewhere": "boundloop.checkpoints.errors",
    "Run": "boundloop.checkpoints.store",
    "TraceEvent": "boundloop.checkpoints.store",
    "append_trace": "boundloop.checkpoints.store",
    "database_url": "boundloop.checkpoints.pool",
    "default_data_dir": "boundloop.checkpoints.cluster",
    "state_dir": "boundloop.checkpoints.cluster",
    "get_ledger_entry": "boundloop.checkpoints.store",
    "get_payload": "boundloop.checkpoints.store",
    "get_run": "boundloop.checkpoints.store",
    "list_runs": "boundloop.checkpoints.store",
    "masked": "boundloop.checkpoints.pool",
    "migrate": "boundloop.checkpoints.schema",
    "open_pool": "boundloop.checkpoints.pool",
    "postgres_saver": "boundloop.checkpoints.saver",
    "put_payload": "boundloop.checkpoints.store",
    "read_trace": "boundloop.checkpoints.store",
    "upsert_run": "boundloop.checkpoints.store",
    "write_abort": "boundloop.checkpoints.store",
    "write_complete": "boundloop.checkpoints.store",
    "write_intent": "boundloop.checkpoints.store",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'boundloop.checkpoints' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
