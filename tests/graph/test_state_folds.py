"""The delta channels' folds (graph/state.py, tools/breakers.py) take a resume's replay of writes in
one pass; they must give what folding each write with the channel's reducer gives, for every kind
of write, however the writes are batched (LangGraph replays them in larger batches than it ran)."""

from __future__ import annotations

from functools import reduce
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import add_messages

from boundloop.graph.core.budget import add_usage
from boundloop.graph.state import _fold_by_call_id, _fold_messages, _fold_usage, merge_by_call_id
from boundloop.tools import breakers

CALL = {"name": "workspace__read_file", "args": {"path": "notes.md"}, "id": "c1", "type": "tool_call"}
MESSAGE_WRITES: list[Any] = [
    [HumanMessage("the task", id="h1")],
    [AIMessage("", id="a1", tool_calls=[CALL])],
    [ToolMessage("the notes", tool_call_id="c1", id="t1")],
    [],  # a node with nothing to say
    [AIMessage("edited", id="a1", tool_calls=[CALL])],  # an update by id
    [AIMessage("two", id="a2"), ToolMessage("result two", tool_call_id="c2", id="t2")],
    [RemoveMessage(id="t1")],
    [AIMessageChunk(content="a chunk", id="k1")],
    [AIMessage("one id", id="d1"), AIMessage("the same id again", id="d1")],
    [AIMessage("no id")],  # add_messages gives it one
    AIMessage("not a list", id="n1"),
    [AIMessage("the end", id="z1")],
]
GIVEN = {"h1", "a1", "t1", "a2", "t2", "k1", "d1", "n1", "z1"}


def _shape(messages: list[Any]) -> list[tuple[str, Any, str | None]]:
    """Type, content and id (an id add_messages made up differs from run to run: None)."""
    return [(type(message).__name__, message.content, message.id if message.id in GIVEN else None) for message in messages]


def test_messages_fold_in_one_pass_as_add_messages_folds_each_write():
    reference = reduce(add_messages, [write for write in MESSAGE_WRITES if write], [])
    assert [message.id for message in reference][:3] == ["h1", "a1", "a2"] and reference[1].content == "edited"
    for split in range(len(MESSAGE_WRITES) + 1):
        folded = _fold_messages(_fold_messages(None, MESSAGE_WRITES[:split]), MESSAGE_WRITES[split:])
        assert _shape(folded) == _shape(reference), split


def test_folding_never_changes_the_value_it_starts_from():
    start = _fold_messages(None, MESSAGE_WRITES[:3])
    before = list(start)
    _fold_messages(start, MESSAGE_WRITES[3:])
    assert start == before


def test_observations_fold_in_one_pass_as_merge_by_call_id_folds_each_write():
    writes = [
        [{"call_id": "a0.0", "tool": "t", "stage": "intended", "status": "pending"}],
        [{"call_id": "a0.0", "stage": "observed", "status": "ok"}, {"call_id": "a1.0", "tool": "u", "stage": "intended"}],
        [],
        [{"call_id": "a1.0", "stage": "attempted", "status": "timeout"}, {"call_id": "a0.0", "stage": "verified"}],
        [{"call_id": "a2.0", "stage": "intended"}, {"call_id": "a2.0", "stage": "observed"}],
    ]
    reference = reduce(merge_by_call_id, writes, [])
    assert [(obs["call_id"], obs["stage"]) for obs in reference] == [("a0.0", "verified"), ("a1.0", "attempted"), ("a2.0", "observed")]
    for split in range(len(writes) + 1):
        assert _fold_by_call_id(_fold_by_call_id(None, writes[:split]), writes[split:]) == reference, split


def test_breakers_fold_in_one_pass_as_merge_folds_each_write():
    writes = [
        {"calls": {"t#1": 1}, "circuits": {"tool:t": {"failures": 0, "opened_at": None}}},
        {"calls": {"t#2": 1}},
        None,
        {"calls": {"t#1": 2}, "circuits": {"tool:t": {"failures": 1, "opened_at": None}}},
        {},
    ]
    reference = reduce(breakers.merge, writes, {})
    assert reference == {"calls": {"t#1": 2, "t#2": 1}, "circuits": {"tool:t": {"failures": 1, "opened_at": None}}, "progress": {}, "epochs": {}}
    for split in range(len(writes) + 1):
        assert breakers.merged(breakers.merged(None, writes[:split]), writes[split:]) == reference, split


def test_usage_folds_in_one_pass_as_add_usage_folds_each_write():
    writes = [
        {"model_turns": 1, "input_tokens": 300, "cost_usd": 0.1, "wall_clock_s": 0.1234567, "calls_by_role": {"actor": 1}},
        {"tool_calls": 1, "per_tool": {"t": 1}, "per_server": {"s": 1}, "context_tokens": 900},
        {},
        {"cost_usd": 0.2, "wall_clock_s": 0.0000004, "context_tokens": 400, "per_tool": {"t": 2, "u": 1}},
        {"cost_usd": 1e-11, "model_turns": 1, "calls_by_role": {"actor": 1, "judge": 1}},
    ]
    reference = reduce(add_usage, writes, {})
    assert reference["cost_usd"] == 0.3 and reference["context_tokens"] == 900 and reference["per_tool"] == {"t": 3, "u": 1}
    for split in range(len(writes) + 1):
        assert _fold_usage(_fold_usage(None, writes[:split]) if split else None, writes[split:]) == reference, split
