"""fold_index: the lookup index of the lists a delta channel's fold returned last, so that the next
step's fold copies it instead of rebuilding it from the whole history.

Folding one step's writes into `messages` or `observations` needs to know which ids (call ids) the
list already holds. Rebuilding that from every element each step would make a step's cost grow
with the length of the run. The fold keeps the index of each list it returns here, with the list, and the next
fold of that list — the channel's value one step later, or LangGraph's copy of it that a routing
guard reads — takes a copy of the index. A list is found by its length and its last element, and
taken only when it holds the same elements (a comparison of pointers for a copy); any other list —
restored from a checkpoint, or changed since — is indexed from scratch. The folds never
change a list in place, so an index held for a list stays right for it. A step that only reads an
index (the counts of graph/ladder.py) takes the held one itself, not a copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

Index = TypeVar("Index")

KEPT = 64
"""Lists held at once per fold: the latest of each run a process drives (a `Runner` drives at most 64
at once). The oldest goes first, and a run whose list went is indexed from scratch once. The lists
held are the runs' own, so this keeps at most 64 finished runs' lists alive longer."""


class FoldIndex(Generic[Index]):
    """The index of recently folded lists, found by length and last element."""

    def __init__(self, build: Callable[[list[Any]], Index], copy: Callable[[Index], Index]) -> None:
        self._build = build
        self._copy = copy
        self._kept: OrderedDict[tuple[int, int], tuple[list[Any], Index]] = OrderedDict()
        self._lock = threading.Lock()  # the graph may run folds on worker threads

    def of(self, value: list[Any]) -> Index:
        """An index of `value` the caller may change."""
        held = self.held(value)
        return self._build(value) if held is None else self._copy(held)

    def held(self, value: Sequence[Any]) -> Index | None:
        """The index held for `value` (or for a list with the same elements), only to read; None when none is."""
        if not value:
            return None
        with self._lock:
            held = self._kept.get(_key(value))
        return held[1] if held is not None and (held[0] is value or held[0] == value) else None

    def keep(self, value: list[Any], index: Index) -> None:
        """Hold `index` for `value` (the list a fold returns, never to be changed in place)."""
        if not value:
            return
        with self._lock:
            self._kept[_key(value)] = (value, index)
            self._kept.move_to_end(_key(value))
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)


def _key(value: Sequence[Any]) -> tuple[int, int]:
    """Length and last element: a held list keeps its last element alive, so its id is not reused."""
    return len(value), id(value[-1])
