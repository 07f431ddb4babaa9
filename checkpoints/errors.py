"""errors: everything the checkpoints package raises at its users.

Class tree:

    CheckpointsError
     ├── DatabaseUnavailable     the database URL does not answer
     ├── DatabaseLost            the database went away mid-run and did not come back in time
     ├── CheckpointUnreadable    a run's checkpoint cannot be decoded
     ├── PostgresNotInstalled    no PostgreSQL server binaries for the embedded cluster
     ├── ClusterStartFailed      the embedded cluster could not be created or started
     ├── ClusterStopFailed       the embedded cluster did not shut down
     ├── LedgerConflict          a ledger entry cannot take the outcome asked for
     ├── RunActiveElsewhere      another process is driving the run
     └── ApprovalRefused         a decision does not fit the request it names

Every message names the thing, the value and the fix. Never raised for the model to read.
"""

from __future__ import annotations

from pathlib import Path

_USE_EXISTING_DATABASE = "set BOUNDLOOP_DATABASE_URL to an existing PostgreSQL database"


class CheckpointsError(Exception):
    """Base class of the package's errors."""


class DatabaseUnavailable(CheckpointsError):
    """The database at `url` refused or failed the connection."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        """The URL with its password masked."""
        self.reason = reason
        super().__init__(
            f"database unavailable at {url}: {reason}. Fix: start PostgreSQL there, or point "
            "BOUNDLOOP_DATABASE_URL at a reachable database (unset it to use the embedded local "
            "cluster)."
        )


class DatabaseLost(CheckpointsError):
    """The connection to the database broke while a run was driven, and reconnecting failed."""

    def __init__(self, thread_id: str, reason: str) -> None:
        self.thread_id = thread_id
        self.reason = reason
        super().__init__(f"database connection lost ({reason}); the run keeps its checkpoint: boundloop resume {thread_id}")


class CheckpointUnreadable(CheckpointsError):
    """A run's stored checkpoint does not decode (corrupted, or written by an incompatible version)."""

    def __init__(self, thread_id: str, reason: str) -> None:
        self.thread_id = thread_id
        self.reason = reason
        super().__init__(
            f"run {thread_id}: its checkpoint is unreadable ({reason}); it cannot be shown or resumed. "
            "Start a new run; its ledger and trace stay in the database for inspection."
        )


class PostgresNotInstalled(CheckpointsError):
    """The embedded cluster needs initdb and pg_ctl, and none were found or installed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"{reason}. Fix: install PostgreSQL (Debian/Ubuntu: apt-get install postgresql), "
            f"or {_USE_EXISTING_DATABASE}."
        )


class ClusterStartFailed(CheckpointsError):
    """The embedded cluster in `data_dir` could not be initialised or started."""

    def __init__(self, data_dir: Path, reason: str, fix: str) -> None:
        self.data_dir = data_dir
        self.reason = reason
        super().__init__(
            f"embedded PostgreSQL in {data_dir} failed: {reason}. Fix: {fix}, "
            f"or {_USE_EXISTING_DATABASE}."
        )


class ClusterStopFailed(CheckpointsError):
    """pg_ctl could not stop the embedded cluster in `data_dir`."""

    def __init__(self, data_dir: Path, reason: str) -> None:
        self.data_dir = data_dir
        self.reason = reason
        super().__init__(
            f"embedded PostgreSQL in {data_dir} did not stop: {reason}. Fix: read "
            f"{data_dir / 'server.log'} and retry; as a last resort run "
            f"`pg_ctl -D {data_dir} stop -m immediate` as the data dir's owner."
        )


class LedgerConflict(CheckpointsError):
    """A ledger outcome was written for a key that is missing or already has one."""

    def __init__(self, idempotency_key: str, status: str | None, wanted: str) -> None:
        self.idempotency_key = idempotency_key
        self.status = status
        found = "no entry" if status is None else f"status {status}"
        super().__init__(
            f"ledger entry {idempotency_key!r} cannot become {wanted}: it has {found}; only an "
            "INTENT can take an outcome. Fix: write_intent first, and read the stored outcome "
            "with get_ledger_entry instead of writing a second one."
        )


class RunActiveElsewhere(CheckpointsError, RuntimeError):
    """Another process is driving this run (it holds the run's lease). A RuntimeError too: the
    LangGraph server shows the message of builtin error types only."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"run {thread_id} is active elsewhere: another process holds its lease. "
            f"Wait for that process to finish or stop it, then `boundloop resume {thread_id}`."
        )


class ApprovalRefused(CheckpointsError):
    """A decision that cannot be applied to the approval request it names."""

    def __init__(self, thread_id: str, call_id: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"decision for call {call_id} of run {thread_id} refused: {reason}. "
            f"See what is waiting with `boundloop pending`."
        )
