"""models: the structured results of the record tools (each becomes a tool's output schema).

Owns the shapes only. Write results carry what they replaced or removed, so a saga can undo them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Result(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class Record(_Result):
    collection: str
    id: str
    data: dict[str, Any]
    """The record's JSON object."""
    version: int
    """1 when created; +1 on every update."""
    created_at: datetime
    updated_at: datetime


class RecordPage(_Result):
    records: list[Record]
    """Sorted by id."""
    truncated: bool
    """True when more records matched than `limit`."""


class Updated(_Result):
    record: Record
    """The record after the update."""
    previous: Record
    """The record before the update, to restore."""


class Deleted(_Result):
    deleted: Record
    """The record as it was, to restore with create_record (same collection, id and data)."""
