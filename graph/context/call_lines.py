"""call_lines: the tool-call lines of the compaction record, kept per run and extended as its calls grow.

Once a run has compacted, every actor request carries the record (graph/context/compaction.py), and the
record lists every call the run made: one line per run of consecutive calls that agree on tool,
status, stage and step. Grouping the whole history again for each request would make a request's
cost grow with the length of the run (3 ms at 1,000 calls), so the lines are kept per run with the records
they were made from. The next request's records are compared with those, by identity first, which is
enough because the fold never changes a record in place (a write makes a new one, graph/state.py);
only the group that holds the first record that differs is grouped again, with what follows it.
A run's calls are appended, so in a long run that is the newest group.
"""

from __future__ import annotations

import operator
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from boundloop.graph.fold_index import KEPT

CALL_ID = re.compile(r"a(\d+)\.(\d+)")
"""A call id the actor's model turns give: `a<turn>.<position in the turn>`."""


def call_lines(run_id: str, records: list[dict[str, Any]]) -> str:
    """The record's lines for `records`, the run's call records: a line per group of consecutive
    alike calls; a call whose output was cut has a line of its own, with its payload pointer."""
    with _LOCK:
        lines = _KEPT.pop(run_id, None) or _Lines()
        _KEPT[run_id] = lines
        while len(_KEPT) > KEPT:
            _KEPT.popitem(last=False)
        return lines.of(records)


@dataclass
class _IdRanges:
    """Call ids as the record writes them: a run of first calls of consecutive turns (a3.0, a4.0,
    a5.0) as a3.0–a5.0, any other id as it is."""

    parts: list[str] = field(default_factory=list)
    run: tuple[int, int] | None = None
    """The turns (first, last) of the run of first calls still open."""

    def add(self, call_id: str) -> None:
        match = CALL_ID.fullmatch(call_id)
        turn = int(match.group(1)) if match and match.group(2) == "0" else None
        if turn is not None and self.run is not None and turn == self.run[1] + 1:
            self.run = (self.run[0], turn)
            return
        if self.run is not None:
            self.parts.append(_turns(self.run))
        if turn is None:
            self.run = None
            self.parts.append(call_id)
        else:
            self.run = (turn, turn)

    def __str__(self) -> str:
        return ", ".join(self.parts if self.run is None else [*self.parts, _turns(self.run)])


def _turns(run: tuple[int, int]) -> str:
    first, last = run
    return f"a{first}.0" if first == last else f"a{first}.0–a{last}.0"


@dataclass
class _Group:
    start: int
    """Position of its first record."""
    first: dict[str, Any]
    ids: _IdRanges = field(default_factory=_IdRanges)
    count: int = 0

    def takes(self, record: dict[str, Any]) -> bool:
        """Whether `record` joins the group: alike, and neither it nor the group holds a pointer
        (a group with a pointer is that one call)."""
        return not self.first.get("pointer") and not record.get("pointer") and _alike(self.first) == _alike(record)

    def add(self, record: dict[str, Any]) -> None:
        self.ids.add(record["call_id"])
        self.count += 1

    def line(self) -> str:
        first = self.first
        count = f" ({self.count} calls)" if self.count > 1 else ""
        pointer = f", {first['pointer']}" if first.get("pointer") else ""
        return (f"- {self.ids}{count}: {first.get('tool')} -> {first.get('status')}, {first.get('stage')}, "
                f"step {first.get('step_id') or '-'}{pointer}")


def _alike(record: dict[str, Any]) -> tuple[Any, ...]:
    return record.get("tool"), record.get("status"), record.get("stage"), record.get("step_id")


class _Lines:
    """The groups of the records last asked about; the lines of all but the last (the only one a
    record can still join) are kept written."""

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._groups: list[_Group] = []
        self._closed: list[str] = []

    def of(self, records: list[dict[str, Any]]) -> str:
        same = len(records) if records is self._records else _common_prefix(self._records, records)
        if same < len(self._records):  # a record was replaced (or the list is another): group again from its group
            keep = next(index for index in range(len(self._groups) - 1, -1, -1) if self._groups[index].start <= same)
            same = self._groups[keep].start
            del self._groups[keep:]
            del self._closed[max(keep - 1, 0):]
        for position in range(same, len(records)):
            self._add(position, records[position])
        self._records = records
        return "\n".join([*self._closed, self._groups[-1].line()]) if self._groups else "(none)"

    def _add(self, position: int, record: dict[str, Any]) -> None:
        if not self._groups or not self._groups[-1].takes(record):
            if self._groups:
                self._closed.append(self._groups[-1].line())
            self._groups.append(_Group(position, record))
        self._groups[-1].add(record)


def _common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many records from the start are the same in both lists: the same objects, or equal ones
    (act merges its grounding into a copy of the state to decide from, so the record a request
    showed and the one the step saved are two equal objects)."""
    same = list(map(operator.is_, old, new))
    for position in range(same.index(False) if False in same else len(same), len(same)):
        if old[position] != new[position]:
            return position
    return len(same)


_KEPT: OrderedDict[str, _Lines] = OrderedDict()
"""The lines of the runs asked about last, the most recent at the end (at most `KEPT`)."""
_LOCK = threading.Lock()
