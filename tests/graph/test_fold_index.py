"""graph/fold_index.py: a fold finds the index of the list it returned last (or LangGraph's copy of
it) instead of rebuilding it, and never hands out an index that is wrong for the list it is asked about."""

from __future__ import annotations

import copy
import random
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import Any

from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import add_messages

from boundloop.graph import fold_index
from boundloop.graph.fold_index import FoldIndex
from boundloop.graph.state import _fold_by_call_id, _fold_messages


def _counting() -> tuple[FoldIndex[set[Any]], list[list[Any]]]:
    built: list[list[Any]] = []

    def build(value: list[Any]) -> set[Any]:
        built.append(value)
        return set(value)

    return FoldIndex(build, set), built


def test_the_list_kept_and_a_copy_of_it_find_its_index_without_a_rebuild():
    index, built = _counting()
    value = ["a", "b", "c"]
    index.keep(value, {"a", "b", "c"})
    assert index.of(value) == {"a", "b", "c"} and index.of(copy.copy(value)) == {"a", "b", "c"}
    assert built == []


def test_an_index_handed_out_is_the_callers_to_change():
    index, _ = _counting()
    value = ["a", "b"]
    index.keep(value, {"a", "b"})
    index.of(value).add("z")
    assert index.of(value) == {"a", "b"}


def test_a_list_with_the_same_length_and_last_element_but_other_elements_is_indexed_from_scratch():
    index, built = _counting()
    last = object()
    kept, other = ["a", "b", last], ["a", "x", last]
    index.keep(kept, {"a", "b", last})
    assert index.of(other) == {"a", "x", last} and built == [other]


def test_at_most_kept_lists_are_held_the_oldest_go_first(monkeypatch):
    monkeypatch.setattr(fold_index, "KEPT", 2)
    index, built = _counting()
    lists = [[f"run{n}"] for n in range(3)]
    for value in lists:
        index.keep(value, set(value))
    assert [index.of(value) for value in lists] == [{"run0"}, {"run1"}, {"run2"}]
    assert built == [lists[0]]


def test_folding_a_copy_of_a_folded_conversation_and_forking_it_gives_what_folding_from_scratch_gives():
    call = {"name": "t", "args": {}, "id": "c1", "type": "tool_call"}
    start = _fold_messages(None, [[AIMessage("", id="a1", tool_calls=[call])], [ToolMessage("r", tool_call_id="c1", id="t1")]])
    branch_one = _fold_messages(copy.copy(start), [[AIMessage("one", id="b1")]])
    branch_two = _fold_messages(start, [[RemoveMessage(id="t1")], [AIMessage("two", id="b2")]])
    again = _fold_messages(branch_one, [[AIMessage("one, edited", id="b1")], [AIMessage("t1 is back", id="t1")]])
    assert [(m.id, m.content) for m in again] == [("a1", ""), ("t1", "t1 is back"), ("b1", "one, edited")]
    assert [m.id for m in branch_two] == ["a1", "b2"]
    assert [m.id for m in _fold_messages(branch_two, [[AIMessage("t1 is new here", id="t1")]])] == ["a1", "b2", "t1"]


def test_observations_folded_from_a_copy_and_from_a_fork_update_their_own_records():
    start = _fold_by_call_id(None, [[{"call_id": "a", "stage": "intended"}], [{"call_id": "b", "stage": "intended"}]])
    one = _fold_by_call_id(copy.copy(start), [[{"call_id": "a", "stage": "observed"}]])
    two = _fold_by_call_id(start, [[{"call_id": "c", "stage": "intended"}], [{"call_id": "b", "stage": "observed"}]])
    assert one == [{"call_id": "a", "stage": "observed"}, {"call_id": "b", "stage": "intended"}]
    assert two == [{"call_id": "a", "stage": "intended"}, {"call_id": "b", "stage": "observed"}, {"call_id": "c", "stage": "intended"}]
    assert start == [{"call_id": "a", "stage": "intended"}, {"call_id": "b", "stage": "intended"}]


def test_more_conversations_than_kept_folded_at_once_on_threads_each_end_as_folding_from_scratch_gives():
    """Runs of one process fold at once, more of them than the index keeps (its entries are evicted
    while in use), on worker threads, some from LangGraph-style copies, with updates and removals by
    id among the appends: each conversation ends as `add_messages` of its writes, one by one."""
    def writes_of(run: int) -> list[list[Any]]:
        chosen, live, writes = random.Random(run), [], []
        for turn in range(40):
            roll = chosen.random()
            if roll < 0.1 and live:
                writes.append([AIMessage(f"edited at {turn}", id=chosen.choice(live))])
            elif roll < 0.2 and live:
                writes.append([RemoveMessage(id=live.pop(chosen.randrange(len(live))))])
            else:
                live.append(f"r{run}-m{turn}")
                writes.append([AIMessage(f"turn {turn}", id=live[-1])])
        return writes

    def runs_in_lockstep(numbers: range) -> list[tuple[list[Any], list[Any]]]:
        """Each turn of every run before the next turn of any: each fold finds the others' lists held."""
        writes = {number: writes_of(number) for number in numbers}
        folded: dict[int, list[Any]] = {number: [] for number in numbers}
        for turn in range(40):
            for number in numbers:
                start = copy.copy(folded[number]) if turn % 3 else folded[number]
                folded[number] = _fold_messages(start, [writes[number][turn]])
        return [(folded[number], reduce(add_messages, writes[number], [])) for number in numbers]

    runs = 2 * fold_index.KEPT
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [pair for batch in pool.map(runs_in_lockstep, [range(start, runs, 4) for start in range(4)]) for pair in batch]
    assert len(results) == runs
    for folded, expected in results:
        assert [(m.id, m.content) for m in folded] == [(m.id, m.content) for m in expected], expected[-1].id
