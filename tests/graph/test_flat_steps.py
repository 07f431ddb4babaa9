"""A long run's steps do work that does not grow with its history (a soak of 1,000
iterations shows flat per-iteration time). Pinned as counts, not timings: how many messages are
tokenised per model request, how many observations the guards and the grounding read per step, and
how many breaker entries a step reads, as history grows — while every request is still measured at
its full size."""

from __future__ import annotations

import gc
import math
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from boundloop.graph.models import size
from boundloop.graph import ladder, safety, tripwires
from boundloop.graph.trace import progress
from boundloop.graph.state import _fold_by_call_id
from boundloop.graph.core.status import Terminal
from boundloop.nodes import act
from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS

READS = 30


def turn(n: int) -> list[BaseMessage]:
    call = {"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 1000 + n}, "id": f"c{n}"}
    return [AIMessage("", tool_calls=[call], id=f"ai{n}"), ToolMessage(f"notes, read {n}", tool_call_id=f"c{n}", id=f"tool{n}")]


def whole_text_estimate(messages: list[BaseMessage], tools: list[dict[str, Any]] | None = None) -> int:
    """The measure without kept counts: the whole request's text at once."""
    import json

    text = "".join(size.message_text(message) for message in messages) + (json.dumps(tools) if tools else "")
    return math.ceil(len(text) / size.CHARS_PER_TOKEN)


@pytest.fixture
def texts_counted(monkeypatch: pytest.MonkeyPatch) -> list[BaseMessage]:
    """Every message whose wire text the measure computes (that is, tokenises)."""
    seen: list[BaseMessage] = []
    original = size.message_text

    def counted(message: BaseMessage) -> str:
        seen.append(message)
        return original(message)

    monkeypatch.setattr(size, "message_text", counted)
    return seen


def test_each_message_is_counted_once_however_long_the_history(texts_counted):
    history: list[BaseMessage] = []
    tools = [{"name": "workspace__read_file", "parameters": {"type": "object"}}]
    counted_per_request = []
    for n in range(200):
        history += turn(n)
        request = [SystemMessage("You are the actor."), HumanMessage(f"brief {n}"), *history]
        texts_counted.clear()
        tokens, method = size.measure("scripted", request, tools)
        counted_per_request.append(len(texts_counted))
        assert method == "estimate"
        texts_counted.clear()
        assert tokens == whole_text_estimate(request, tools)  # the full request, not the new part
    assert counted_per_request[0] == 4 and set(counted_per_request[1:]) == {4}  # system, brief, the turn's call and result


def test_a_replaced_message_is_counted_afresh_and_a_gone_one_is_forgotten():
    gc.collect()
    before = len(size._COUNTS)
    first = AIMessage("short", id="m1")
    assert size.measure("scripted", [first]) == (math.ceil(len("short") / 3), "estimate")
    replaced = AIMessage("a much longer answer than before", id="m1")  # same id, new object (as add_messages replaces)
    assert size.measure("scripted", [replaced])[0] == math.ceil(len(replaced.content) / 3)
    assert len(size._COUNTS) == before + 2
    del first, replaced
    gc.collect()
    assert len(size._COUNTS) == before


def test_a_tokenizer_counts_each_message_once_with_its_framing(monkeypatch, texts_counted):
    words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer
    monkeypatch.setattr(size, "counter_for", lambda model: (words, "words"))
    history = [*turn(0), HumanMessage("one two three")]
    tokens, method = size.measure("gpt-x", history)
    assert method == "words"
    assert tokens == sum(words(size.message_text(m)) for m in history) + size.TOKENS_PER_MESSAGE * len(history)
    texts_counted.clear()
    assert size.measure("gpt-x", history)[0] == tokens and texts_counted == []


class CountingObservation(dict):
    """An observation that counts the guards' reads of its fields."""

    reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        CountingObservation.reads += 1
        return super().get(key, default)


def observations(count: int) -> list[dict[str, Any]]:
    return [CountingObservation(call_id=f"a{n}.0", phase="act", tool="workspace__read_file", args_hash=str(n),
                                status="ok", stage="verified", instructions=[]) for n in range(count)]


def guard_reads(count: int) -> int:
    history = _fold_by_call_id(None, [observations(count)])  # as the run's channel holds them
    state = {"observations": history, "messages": [], "usage": {"calls_by_role": {"actor": 3}},
             "plan": {"steps": [{"id": "s1", "description": "read", "tools": ["workspace__read_file"], "status": "in_progress"}]}}
    CountingObservation.reads = 0
    assert tripwires.tripped(state) is None
    return CountingObservation.reads


def test_the_guards_read_as_few_observations_however_long_the_history():
    """The refusal checks (safety and permission each ask whether anything was refused) read the
    statuses the fold counts (graph/ladder.py); the loop check reads back to the latest progress
    only. It was six passes, then two."""
    assert guard_reads(1000) == guard_reads(100) <= 5


def test_the_guards_still_trip_on_a_long_history():
    calls = observations(500)
    calls += [CountingObservation(call_id=f"a{500 + n}.0", phase="act", tool="workspace__write_file", args_hash="w",
                                  status="denied", detail="policy") for n in range(3)]
    state = {"observations": calls, "messages": [], "plan": {"steps": []}}
    assert tripwires.tripped(state)["code"] == Terminal.UNSAFE_DETECTION  # three denials, whatever came before
    failing = observations(500) + [CountingObservation(call_id=f"a{500 + n}.0", phase="act", tool="t", args_hash="h",
                                                       status="tool_error") for n in range(3)]
    assert tripwires.repeated_failure({"observations": failing})["code"] == Terminal.REPEATED_FAILURE
    progress_between = [*failing[:-1], CountingObservation(call_id="a900.0", phase="act", tool="t", status="ok", stage="verified"), failing[-1]]
    assert tripwires.repeated_failure({"observations": progress_between}) is None  # a verified call resets the count
    assert safety.refused_any({"observations": []}) is False


def test_the_progress_line_names_recent_calls_without_reading_the_history():
    known = observations(1000)
    CountingObservation.reads = 0
    line = progress.phase_progress("observe", {"observations": [{"call_id": "a999.0", "stage": "verified"}]}, {}, None, known)
    assert line["tools"] == [{"tool": "workspace__read_file", "status": "verified"}]
    assert CountingObservation.reads <= 2


def test_the_briefs_evidence_is_read_from_what_the_fold_kept():
    """The actor's brief lists the retrieve phase's records; it finds them in the ladder the fold
    keeps (graph/ladder.py), not by a pass over every call of the run."""
    evidence = [CountingObservation(call_id=f"r{n}", phase="retrieve", tool="workspace__read_file", status="ok", stage="verified")
                for n in range(2)]
    history = _fold_by_call_id(None, [[evidence[0], *observations(1000), evidence[1]]])
    state = {"observations": history, "task": {"goal": "read"}, "plan": {}}
    CountingObservation.reads = 0
    brief = act._brief(state)
    assert CountingObservation.reads <= 20, CountingObservation.reads
    assert "[r0] workspace__read_file -> ok" in brief and brief.index("[r0]") < brief.index("[r1]") and "[a0.0]" not in brief
    restored = [dict(record) for record in history]  # as read from a checkpoint: no kept ladder, one is built
    assert act._brief({**state, "observations": restored}) == brief


async def reading_run(run_script: Any) -> Any:
    """A real run of READS reads of notes.md (each with other arguments, so none is a repeat), then the answer."""
    plan = {"content": {"steps": [{"id": "s1", "description": "read", "tools": ["workspace__read_file"]}], "blocked": None}}
    actor = [{"tool_calls": [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 1000 + n}}]} for n in range(READS)]
    report = await run_script({"planner": [plan], "actor": [*actor, {"content": "Ana publishes the notes."}],
                               "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]},
                              task={"budget": {"model_turns": None, "tool_calls": None}}, unattended=True)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    return report


async def test_a_long_run_tokenises_the_same_few_messages_per_request(run_script, monkeypatch):
    """Real runtime: the actor's requests grow, the messages tokenised for each do not, and each
    request's measure (what the budget meters) is its whole text."""
    requests: list[tuple[int, int, int, int]] = []  # (messages, texts computed, tokens, whole-text tokens)
    seen: list[BaseMessage] = []
    original_text, original_measure = size.message_text, size.measure

    def counted(message: BaseMessage) -> str:
        seen.append(message)
        return original_text(message)

    def measured(model: str, messages: Any, tools: Any = None) -> tuple[int, str]:
        seen.clear()
        tokens, method = original_measure(model, messages, tools)
        computed = len(seen)
        requests.append((len(messages), computed, tokens, whole_text_estimate(list(messages), tools)))
        return tokens, method

    monkeypatch.setattr(size, "message_text", counted)
    monkeypatch.setattr(size, "measure", measured)
    await reading_run(run_script)

    actor_requests = [request for request in requests if request[0] > 2]  # the planner's and critic's are short
    assert actor_requests[-1][0] >= actor_requests[5][0] + 2 * (READS - 10)  # the conversation grew
    assert all(tokens == whole for _, _, tokens, whole in requests)  # metered on the whole request
    late = [computed for _, computed, _, _ in actor_requests[5:]]
    assert max(late) <= 4, f"messages tokenised per request grow with the history: {late}"


def test_an_empty_messages_write_leaves_the_conversation_as_it_is():
    """A node that writes `messages: []` (nothing to say this turn) must not make the fold copy the whole conversation."""
    from boundloop.graph.state import _fold_messages

    history = [message for n in range(100) for message in turn(n)]
    assert _fold_messages(history, [[]]) is history
    grown = _fold_messages(history, [[], [AIMessage("done", id="end")]])
    assert [message.id for message in grown] == [*(message.id for message in history), "end"]
    assert _fold_messages(None, [[]]) == []


async def test_a_long_run_reads_its_call_records_from_what_the_fold_kept(run_script, monkeypatch):
    """Real runtime: every list of observations a guard or the grounding reads is one the fold made
    (or LangGraph's copy of it), so none is read by a pass over the history (graph/ladder.py)."""
    passes: list[int] = []
    original = ladder.build

    def build(records: list[dict[str, Any]]) -> ladder.Ladder:
        passes.append(len(records))
        return original(records)

    monkeypatch.setattr(ladder, "build", build)
    report = await reading_run(run_script)
    assert len(report.values["observations"]) == READS
    assert [size for size in passes if size] == [], f"observations read by a pass over the history: {passes}"
