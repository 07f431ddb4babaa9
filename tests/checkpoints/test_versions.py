"""Channel versions (BoundloopSaver.get_next_version): short (base-62 counters), ordered as
LangGraph compares them (as strings), apart between a thread's branches, compatible with the
Postgres saver's 32 digits both ways, and continuing boundloop's earlier 10 decimal digits."""

from __future__ import annotations

import operator
import random
import secrets
import re
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import postgres_saver
from boundloop.checkpoints.saver import BoundloopSaver

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
SHORT = re.compile(r"[0-9A-Za-z]{6}\.[A-Za-z0-9_-]{8}")
DECIMAL = re.compile(r"\d{10}\.[A-Za-z0-9_-]{8}")
"""boundloop's versions before base 62."""
WIDE = re.compile(r"\d{32}\..+")
"""The Postgres saver's counter width (it writes a random float after it)."""


def _fold(current: list[str] | None, writes: Sequence[list[str]]) -> list[str]:
    return [*(current or []), *(item for write in writes for item in write)]


class Loop(TypedDict):
    limit: int
    pause_at: list[int]
    n: int
    doc: dict[str, Any]
    trail: Annotated[list[str], operator.add]
    log: Annotated[list[str], DeltaChannel(_fold, snapshot_frequency=2)]
    """The same entries as `trail`, stored as deltas with a snapshot every second update."""


def _loop_graph() -> StateGraph:
    """START → work → review → work … until n reaches the limit; review asks at each `pause_at`."""

    def work(state: Loop) -> dict[str, Any]:
        n = state["n"] + 1
        return {"n": n, "doc": {"n": n, "fork": state["doc"].get("fork", False)}, "trail": [f"work {n}"], "log": [f"work {n}"]}

    def review(state: Loop) -> dict[str, Any]:
        if state["n"] in state["pause_at"]:
            interrupt(f"go on after {state['n']}?")
        return {"trail": [f"review {state['n']}"], "log": [f"review {state['n']}"]}

    builder = StateGraph(Loop)
    builder.add_node("work", work)
    builder.add_node("review", review)
    builder.add_edge(START, "work")
    builder.add_edge("work", "review")
    builder.add_conditional_edges("review", lambda state: "work" if state["n"] < state["limit"] else END, ["work", END])
    return builder


def _start(limit: int, pause_at: Sequence[int] = ()) -> dict[str, Any]:
    return {"limit": limit, "pause_at": list(pause_at), "n": 0, "doc": {}, "trail": [], "log": []}


def _expected(limit: int, pause_at: Sequence[int] = ()) -> dict[str, Any]:
    trail = [entry for n in range(1, limit + 1) for entry in (f"work {n}", f"review {n}")]
    return {**_start(limit, pause_at), "n": limit, "doc": {"n": limit, "fork": False}, "trail": trail, "log": trail}


def _versions(checkpoint: Checkpoint) -> list[str]:
    """Every version a checkpoint holds: its channels' and the ones its nodes have seen."""
    seen = [version for by_channel in checkpoint["versions_seen"].values() for version in by_channel.values()]
    return [*checkpoint["channel_versions"].values(), *seen]


async def _lineage(saver: AsyncPostgresSaver, config: RunnableConfig) -> list[CheckpointTuple]:
    """The checkpoints `config` stands on, oldest first (its branch only)."""
    lineage: list[CheckpointTuple] = []
    at: RunnableConfig | None = config
    while at is not None and (saved := await saver.aget_tuple(at)) is not None:
        lineage.append(saved)
        at = saved.parent_config
    return lineage[::-1]


def _by_counter(lineage: list[CheckpointTuple]) -> dict[tuple[str, str], str]:
    """(channel, counter) → the version a branch wrote with that counter."""
    return {(channel, version.split(".")[0]): version for saved in lineage for channel, version in saved.checkpoint["channel_versions"].items()}


def _assert_ordered(lineage: list[CheckpointTuple]) -> None:
    """Along a branch, each channel's version only grows, and no node has seen a version its channel
    does not have yet: what LangGraph's `>` between versions relies on."""
    for before, after in zip(lineage, lineage[1:]):
        for channel, version in after.checkpoint["channel_versions"].items():
            assert version >= before.checkpoint["channel_versions"].get(channel, ""), (channel, before.checkpoint["id"])
    for saved in lineage:
        current = saved.checkpoint["channel_versions"]
        for node, seen in saved.checkpoint["versions_seen"].items():
            assert all(version <= current[channel] for channel, version in seen.items()), (node, saved.checkpoint["id"])


async def test_versions_are_short_and_increase_across_a_run_that_reads_back_whole(db_url: str) -> None:
    async with postgres_saver(db_url) as saver:
        final = await _loop_graph().compile(checkpointer=saver).ainvoke(_start(limit=8), CONFIG)
    async with postgres_saver(db_url) as fresh:  # read back from the database only
        graph = _loop_graph().compile(checkpointer=fresh)
        latest = await graph.aget_state(CONFIG)
        history = [snapshot async for snapshot in graph.aget_state_history(CONFIG)]
        lineage = await _lineage(fresh, CONFIG)

    assert final == latest.values == _expected(8)
    versions = [version for saved in lineage for version in _versions(saved.checkpoint)]
    assert len(lineage) == len(history) > 16 and all(SHORT.fullmatch(version) for version in versions), versions[:5]
    _assert_ordered(lineage)
    for snapshot in history:  # every step reads back: the blob channels agree with the delta channel
        values = snapshot.values
        assert values.get("trail") == values.get("log") and values.get("doc", {}).get("n", 0) == values.get("n", 0), snapshot.config


async def test_a_fork_and_its_original_branch_read_back_their_own_values(db_url: str) -> None:
    """The fork writes the same counters as the branch it left, with other values: the random part
    keeps its blobs (keyed by version) from being taken for the original branch's."""
    async with postgres_saver(db_url) as saver:
        graph = _loop_graph().compile(checkpointer=saver)
        original = await graph.ainvoke(_start(limit=3), CONFIG)
        original_end = (await graph.aget_state(CONFIG)).config
        [after_work_1] = [s async for s in graph.aget_state_history(CONFIG) if s.next == ("review",) and s.values["n"] == 1]
        forked = await graph.aupdate_state(after_work_1.config, {"doc": {"n": 1, "fork": True}, "trail": ["fork"], "log": ["fork"]},
                                           as_node="work")
        fork_final = await graph.ainvoke(None, forked)
        original_again = (await graph.aget_state(original_end)).values
        fork_again = (await graph.aget_state(CONFIG)).values
        both = [s async for s in graph.aget_state_history(CONFIG)]
        fork_lineage, original_lineage = await _lineage(saver, CONFIG), await _lineage(saver, original_end)

    trail = ["work 1", "fork", "review 1", "work 2", "review 2", "work 3", "review 3"]
    assert original == original_again == _expected(3)
    assert fork_final == fork_again == {**_expected(3), "doc": {"n": 3, "fork": True}, "trail": trail, "log": trail}
    fork_wrote, original_wrote = _by_counter(fork_lineage), _by_counter(original_lineage)
    clashes = {channel for channel, counter in fork_wrote.keys() & original_wrote.keys() if fork_wrote[channel, counter] != original_wrote[channel, counter]}
    assert "trail" in clashes, f"the fork wrote no counter of its original branch's: nothing to keep apart ({clashes})"
    for snapshot in both:  # each checkpoint of either branch reads back its own values
        values = snapshot.values
        assert values.get("trail") == values.get("log"), snapshot.config
        assert values.get("doc", {}).get("fork", False) == ("fork" in values.get("trail", [])), snapshot.config


async def test_a_thread_of_the_postgres_saver_goes_on_with_ours_and_back(db_url: str) -> None:
    """A thread saved by the Postgres saver (databases from before, an older boundloop still
    running) keeps its 32 digits with us, so it can go back to that saver afterwards."""
    async with postgres_saver(db_url) as saver:
        plain = AsyncPostgresSaver(saver.conn)
        await _loop_graph().compile(checkpointer=plain).ainvoke(_start(limit=6, pause_at=[2, 4]), CONFIG)
        before = await _lineage(saver, CONFIG)
        await _loop_graph().compile(checkpointer=saver).ainvoke(Command(resume="go on"), CONFIG)
        ours = (await _lineage(saver, CONFIG))[len(before):]
        final = await _loop_graph().compile(checkpointer=plain).ainvoke(Command(resume="go on"), CONFIG)
        lineage = await _lineage(saver, CONFIG)

    assert final == _expected(6, pause_at=[2, 4])
    assert ours and all(WIDE.fullmatch(version) for saved in ours for version in _versions(saved.checkpoint))
    latest_before = {channel: version for saved in before for channel, version in saved.checkpoint["channel_versions"].items()}
    moved = {channel: version for channel, version in ours[-1].checkpoint["channel_versions"].items() if version != latest_before.get(channel)}
    assert moved and all(version > latest_before.get(channel, "") for channel, version in moved.items())
    _assert_ordered(lineage)


async def test_a_version_compares_greater_than_the_one_it_follows_whatever_its_width(pool: AsyncConnectionPool) -> None:
    """As strings, the way LangGraph compares them: across the digit counts of the counter, and a
    10-digit version after 32-digit ones (`current=None` gives one to a never-written channel that
    a fork of an old thread snapshots)."""
    saver = BoundloopSaver(pool)
    old = [f"{counter:032}.{random.random()}" for counter in (0, 1, 9, 10, 99, 185, 10**9, 10**10, 10**21)]
    after_old = [saver.get_next_version(version, None) for version in old]
    chain = [saver.get_next_version(None, None)]
    for _ in range(1_200):
        chain.append(saver.get_next_version(chain[-1], None))

    assert all(WIDE.fullmatch(new) and new > version for version, new in zip(old, after_old))
    counters = [version.split(".")[0] for version in chain]
    assert counters[:3] == ["000001", "000002", "000003"] and counters[9:11] == ["00000A", "00000B"]
    assert counters[61:63] == ["000010", "000011"] and counters[-1] == "0000JN"  # 62 = "10"; 1201 = 19 * 62 + 23
    assert all(SHORT.fullmatch(version) for version in chain) and chain == sorted(chain) and len(set(counters)) == len(chain)
    assert all(chain[0] > version for version in old + after_old)
    decimal = [f"{counter:010}.abcdefgh" for counter in (1, 99, 12_345, 10**9)]
    assert [saver.get_next_version(version, None).split(".")[0] for version in decimal] == ["0000000002", "0000000100", "0000012346", "1000000001"]


class _DecimalSaver(BoundloopSaver):
    """boundloop's saver before base 62: 10 decimal digits."""

    def get_next_version(self, current: str | None, channel: None) -> str:
        counter = "" if current is None else str(current).split(".")[0]
        return f"{int(counter or 0) + 1:0{max(len(counter), 10)}}.{secrets.token_urlsafe(6)}"


async def test_a_thread_of_the_decimal_versions_goes_on_with_them(db_url: str) -> None:
    """A thread started by boundloop before base 62 keeps its 10 decimal digits, ordered, and reads
    back whole: an older process can still continue it."""
    async with postgres_saver(db_url) as saver:
        older = _DecimalSaver(saver.conn)
        await _loop_graph().compile(checkpointer=older).ainvoke(_start(limit=6, pause_at=[3]), CONFIG)
        before = await _lineage(saver, CONFIG)
        final = await _loop_graph().compile(checkpointer=saver).ainvoke(Command(resume="go on"), CONFIG)
        lineage = await _lineage(saver, CONFIG)

    assert final == _expected(6, pause_at=[3])
    ours = lineage[len(before):]
    assert ours and all(DECIMAL.fullmatch(version) for saved in ours for version in _versions(saved.checkpoint))
    _assert_ordered(lineage)
