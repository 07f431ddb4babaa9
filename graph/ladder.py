"""ladder: what each step asks of a run's call records, kept with the fold instead of read from the
whole history every time.

`observations` (and `approvals`) are records merged by call id (graph/state.py). Every guard asks
whether any call was refused by authority (graph/safety.py); every act step asks which calls await
grounding and whether a dispatched call has run (nodes/observe.py); every actor turn asks whether
a result was stored as a payload (graph/context/payloads.py) and which records are the retrieve phase's
evidence (the brief, nodes/act.py). Each answered by a pass over every record
would make an iteration's cost grow with the length of the run. The fold keeps a `Ladder` for each list it
returns (graph/fold_index.py) and updates it for the records a write adds or replaces; `of()` finds
it for the list a step reads, or builds it in one pass for a list the fold did not make (one
restored from a checkpoint, or built by hand). A kept ladder stays right for its list because the
fold never changes a list or a record in place: a write's fields are merged into a new record.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from boundloop.graph.core.records import Stage
from boundloop.graph.fold_index import FoldIndex

Record = TypeVar("Record", bound=Mapping[str, Any])

AWAITING_GROUNDING: frozenset[Stage] = frozenset({"observed", "attempted"})
"""Stages of a call that ran (or was sent and never answered) and that observe has not grounded yet."""


@dataclass
class Ladder:
    """Where each call's record is, and the counts the steps ask about."""

    positions: dict[str, int] = field(default_factory=dict)
    statuses: Counter[Any] = field(default_factory=Counter)
    """Records per `status` (absent, not zero, when none has it)."""
    ungrounded: dict[str, None] = field(default_factory=dict)
    """Call ids awaiting grounding (a dict, used as a set with a stable order)."""
    pointers: int = 0
    """Records that hold a payload pointer."""
    evidence: dict[str, None] = field(default_factory=dict)
    """Call ids of the retrieve phase's records."""

    def awaiting_grounding(self, records: Sequence[Record]) -> list[Record]:
        """The records (of the list this ladder is of) of calls that ran and are not grounded yet, in order."""
        return [records[position] for position in sorted(self.positions[call_id] for call_id in self.ungrounded)]

    def evidence_of(self, records: Sequence[Record]) -> list[Record]:
        """The retrieve phase's records (of the list this ladder is of), in order."""
        return [records[position] for position in sorted(self.positions[call_id] for call_id in self.evidence)]

    def record(self, records: Sequence[Record], call_id: str) -> Record | None:
        position = self.positions.get(call_id)
        return None if position is None else records[position]

    def copy(self) -> Ladder:
        return Ladder(dict(self.positions), self.statuses.copy(), dict(self.ungrounded), self.pointers, dict(self.evidence))

    def add(self, record: Mapping[str, Any], position: int) -> None:
        self.positions[record["call_id"]] = position
        self._count(record, 1)

    def replace(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._count(old, -1)
        self._count(new, 1)

    def _count(self, record: Mapping[str, Any], sign: int) -> None:
        status = record.get("status")
        self.statuses[status] += sign
        if not self.statuses[status]:
            del self.statuses[status]
        if record.get("pointer"):
            self.pointers += sign
        if record.get("phase") == "retrieve":
            if sign > 0:
                self.evidence[record["call_id"]] = None
            else:
                self.evidence.pop(record["call_id"], None)
        if record.get("stage") in AWAITING_GROUNDING and not record.get("grounded"):
            if sign > 0:
                self.ungrounded[record["call_id"]] = None
            else:
                self.ungrounded.pop(record["call_id"], None)


def build(records: Sequence[Mapping[str, Any]]) -> Ladder:
    ladder = Ladder()
    for position, record in enumerate(records):
        ladder.add(record, position)
    return ladder


KEPT = FoldIndex(build, Ladder.copy)
"""The ladders of the lists the fold returned last (graph/state.py keeps them)."""


def of(records: Sequence[Mapping[str, Any]]) -> Ladder:
    """The ladder of `records`, only to read."""
    held = KEPT.held(records)
    return build(records) if held is None else held
