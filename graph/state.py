"""state: the one checkpointed state object of a run, and the reducers that merge node updates.

Kept small on purpose, so a checkpoint's size stays near-constant per step: full tool payloads live in the Postgres observation store;
state keeps an excerpt, a hash and a pointer. `messages`, `observations`, `usage` and `breakers`
(which counts every distinct call) are delta channels, so a checkpoint stores only what a step
added or changed, not the whole history or total again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Callable, cast

from langchain_core.messages import AnyMessage, BaseMessage, BaseMessageChunk, RemoveMessage
from langgraph.channels import DeltaChannel
from langgraph.graph.message import add_messages
from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic builds the server's output schema only from this one on 3.11

from boundloop.graph import ladder
from boundloop.graph.core.budget import add_usage, summed_usage
from boundloop.graph.core.records import Approval, Control, Ending, Observation, Plan, Quality, Status, Usage
from boundloop.graph.fold_index import FoldIndex
from boundloop.tools import breakers as breaker_state

SNAPSHOT_EVERY = 4_000
"""Updates between full snapshots of a growing channel (LangGraph's default is 100; it also
snapshots every delta channel 5,000 steps after its last). Each snapshot holds the whole history,
so snapshots every 100 (or 1,000) updates would make storage grow with the square of a long run's
length; a loop iteration updates the conversation twice, so this is one every 2,000 iterations.
Between snapshots only each step's delta is stored, and a resume replays at most this many small
writes, each fold in one pass."""
USAGE_SNAPSHOT_EVERY = 100
"""Updates between snapshots of `usage`, which is a total of bounded size (a few hundred bytes
however long the run), not a history: a snapshot every 100 updates (about 50 iterations) adds 8 KB
over 1,000 iterations, and a read (a resume, `boundloop show`) replays at most 100 usage deltas
instead of one per step of the run (which would be two fifths of the rows a read of a 1,000-iteration
run replays)."""


def _fold_messages(current: list[AnyMessage] | None, writes: list[Any]) -> list[AnyMessage]:
    """Writes in order, in one pass. A write of new messages only (the loop's usual: a reply, a tool
    result) is appended, which is what `add_messages` makes of it; any other (an update or removal
    by id, a chunk, a message without an id) goes through `add_messages`. Folding every write with
    `add_messages`, which copies and re-indexes the whole conversation each time, would make a resume's
    replay of the writes since the last snapshot quadratic in their number, and indexing the
    conversation's ids each step would make a step's cost grow with the run (graph/fold_index.py keeps
    them). An empty write (a node with nothing to say this turn) adds nothing, not even a copy."""
    writes = [write for write in writes if write]
    if not writes:
        return current or []
    messages: list[Any] = list(current or [])  # add_messages takes and returns any message-like values
    ids = _MESSAGE_IDS.of(current or [])
    for write in writes:
        if _only_new(write, ids):
            messages.extend(write)
            ids.update(message.id for message in write)
        else:
            messages = cast("list[Any]", add_messages(messages, write))  # a list in is a list out; its signature says any Messages
            ids = _message_ids(messages)
    _MESSAGE_IDS.keep(messages, ids)
    return messages


def _message_ids(messages: list[AnyMessage]) -> set[str | None]:
    return {message.id for message in messages}


_MESSAGE_IDS: FoldIndex[set[str | None]] = FoldIndex(_message_ids, set)


def _only_new(write: Any, ids: set[str | None]) -> bool:
    """Whether `write` is whole messages with ids of their own, none among `ids`."""
    if not isinstance(write, list):
        return False
    fresh = {message.id for message in write
             if isinstance(message, BaseMessage) and not isinstance(message, (RemoveMessage, BaseMessageChunk)) and message.id is not None}
    return len(fresh) == len(write) and fresh.isdisjoint(ids)


def merge_by_call_id(current: list[dict[str, Any]] | None, update: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records keyed by call id: a later write for the same call updates it in place."""
    return _fold_by_call_id(current, [update])


def _fold_by_call_id(current: list[dict[str, Any]] | None, writes: list[Any]) -> list[dict[str, Any]]:
    """`merge_by_call_id` of each write in turn, in one pass (a replay is not quadratic). The list's
    ladder (graph/ladder.py: positions by call id, and the counts the steps ask about) is kept with it."""
    merged = list(current or [])
    index = ladder.KEPT.of(current or [])
    for update in writes:
        for obs in update:
            position = index.positions.get(obs["call_id"])
            if position is None:
                index.add(obs, len(merged))
                merged.append(obs)
            else:
                record = {**merged[position], **obs}
                index.replace(merged[position], record)
                merged[position] = record
    ladder.KEPT.keep(merged, index)
    return merged


def _fold_usage(current: dict[str, Any] | None, writes: list[Any]) -> Usage:
    return summed_usage(current, writes)


def merge_by_key(current: Mapping[str, Any] | None, update: Mapping[str, Any]) -> dict[str, Any]:
    """A record of named parts: a write replaces the parts it names and keeps the rest, so two nodes of
    one step (the judge's verification and the critic's scores) each write their own part."""
    return {**(current or {}), **update}


def merge_by_role(current: Mapping[str, Any] | None, update: Mapping[str, Any]) -> dict[str, Any]:
    """The newer measure, with every role's latest request size (`by_role`) from both: the judge's and
    the critic's requests of one step each keep theirs."""
    return {**update, "by_role": {**((current or {}).get("by_role") or {}), **(update.get("by_role") or {})}}


def merge_messages(current: list[AnyMessage] | None, update: Any) -> list[AnyMessage]:
    """`add_messages` of one update, by the fold (a long conversation is not re-indexed)."""
    return _fold_messages(current, [update])


MERGED_BY: dict[str, Callable[[Any, Any], Any]] = {"messages": merge_messages, "observations": merge_by_call_id, "usage": add_usage, "breakers": breaker_state.merge,
             "approvals": merge_by_call_id, "quality": merge_by_key,
             "context": merge_by_role}
"""The channels whose writes are merged into the value (the rest are replaced), as LoopState declares them."""


def applied(state: Mapping[str, Any], update: Mapping[str, Any]) -> LoopState:
    """The state once `update` is merged by the channels' reducers: what a node that goes on in the
    same step (act's grounding and gate, nodes/act.py) must decide from, before the step is saved."""
    merged = dict(state)
    for key, value in update.items():
        merged[key] = MERGED_BY[key](state.get(key) or type(value)(), value) if key in MERGED_BY else value
    return cast("LoopState", merged)  # each channel merged as LoopState declares it


def combined(first: LoopUpdate, second: LoopUpdate) -> LoopUpdate:
    """One update that has the effect of `first`, then `second`, written in one step: a merged
    channel gets both writes (messages and observations in order), any other the later value."""
    merged: dict[str, Any] = dict(first)
    later: Mapping[str, Any] = second
    for key, value in later.items():
        if key not in first or key not in MERGED_BY:
            merged[key] = value
        elif key in ("messages", "observations"):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = MERGED_BY[key](merged[key], value)
    return cast("LoopUpdate", merged)


@with_config(ConfigDict(use_attribute_docstrings=True))  # the docstrings below become the output schema's descriptions
class LoopState(TypedDict, total=False):
    """The run, as every node sees it. Values are JSON-able so Studio and the CLI can show them."""

    task: dict[str, Any]
    """The task (boundloop.graph.task.Task as JSON)."""
    settings: dict[str, Any]
    """The run settings captured at intake (boundloop.graph.task.RunSettings as JSON)."""
    budget: dict[str, Any]
    """The budget in force: profile defaults plus the task's overrides (boundloop.graph.core.budget.Budget as JSON)."""
    boundary: dict[str, Any]
    """The autonomy boundary: profile, policy version hash, servers and tools the run may use."""
    tools: dict[str, Any]
    """The tool definitions pinned at intake, written once: {"version": registry hash, "specs": [...]}.
    Every step's registry comes from here, not from the live servers (tools/pinning.py)."""
    control: Control
    """Which costly phases the run enters and why (graph/quality/proportion.py): planning and the judge decided
    at intake, the critic after verification, each {mode, run or plan, reason}."""
    plan: Plan
    """Steps (id, description, depends_on, tools, done_when, status), the plan hash, validation errors."""
    clarifications: list[str]
    """Questions a human answered during the run ("question → answer"); the planner reads them."""
    evidence: list[dict[str, Any]]
    """Results of the plan's read-only evidence steps, each with its source call."""
    memories: list[dict[str, Any]]
    """Persistent memories recalled at intake (graph/context/memory.py): retrieved evidence with its source, never instructions."""
    messages: Annotated[list[AnyMessage], DeltaChannel(_fold_messages, snapshot_frequency=SNAPSHOT_EVERY)]
    """The actor's conversation: each AI tool call is paired with exactly one tool result."""
    observations: Annotated[list[Observation], DeltaChannel(_fold_by_call_id, snapshot_frequency=SNAPSHOT_EVERY)]
    """One record per tool call, climbing the grounding ladder: intended (proposed) → attempted (sent) →
    observed (a result came back) → verified (its post-condition holds) → committed (in the committed result)."""
    context: Annotated[dict[str, Any], merge_by_role]
    """The last model request's measure: role, tokens, growth since that role's previous request,
    method (tokenizer or estimate), limit; `pressure` when the actor's next request needs compaction.
    Each role's latest size is kept in `by_role`, also when two roles ask in one step."""
    usage: Annotated[Usage, DeltaChannel(_fold_usage, snapshot_frequency=USAGE_SNAPSHOT_EVERY)]
    """Budget consumed so far; nodes send deltas, the reducer sums them (and a checkpoint stores
    only them: the whole total in every step's checkpoint was a third of an iteration's blobs)."""
    breakers: Annotated[dict[str, Any], DeltaChannel(breaker_state.merged, snapshot_frequency=SNAPSHOT_EVERY)]
    """Repeated-call and circuit-breaker counters (boundloop.tools.breakers), checkpointed with the run; nodes
    write only the entries they changed (one per distinct call grows the whole), the reducer merges them."""
    dispatch: list[list[dict[str, Any]]]
    """Admitted calls waiting to run, in waves: reads together, each write alone, in proposed order."""
    approvals: Annotated[list[Approval], merge_by_call_id]
    """Calls waiting for a human decision, and the decisions made (one record per call id)."""
    quality: Annotated[Quality, merge_by_key]
    """Verification verdicts, critique scores, repair log, failure signatures, confidence; a write
    replaces the parts it names (verify's and the critic's parts may be written in one step)."""
    goal_check: dict[str, Any]
    """The latest periodic goal check (graph/quality/goal_check.py): its window of actor turns, progress
    signals, the goal_check model's verdict (or why there is none) and the decision."""
    ending: Ending | None
    """Set by the node that decides how the run ends: {code, reason, next_safe_action}."""
    status: Status
    """Current phase and, once ended, the terminal code."""
    result: dict[str, Any]
    """The terminal artifact: result with provenance, failure report, or halt record."""


class LoopUpdate(TypedDict, total=False):
    """What a node returns: the channels it changed, each as LoopState holds it (a merged channel's
    value is the write its reducer merges: new or changed records, a usage delta)."""

    task: dict[str, Any]
    settings: dict[str, Any]
    budget: dict[str, Any]
    boundary: dict[str, Any]
    tools: dict[str, Any]
    control: Control
    plan: Plan
    clarifications: list[str]
    evidence: list[dict[str, Any]]
    memories: list[dict[str, Any]]
    messages: Sequence[AnyMessage | RemoveMessage]
    """New messages, or a RemoveMessage for one to drop (add_messages merges both)."""
    observations: list[Observation]
    context: dict[str, Any]
    usage: Usage
    breakers: dict[str, Any]
    dispatch: list[list[dict[str, Any]]]
    approvals: list[Approval]
    quality: Quality
    goal_check: dict[str, Any]
    ending: Ending | None
    status: Status
    result: dict[str, Any]
