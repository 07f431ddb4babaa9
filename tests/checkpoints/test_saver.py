"""LangGraph's Postgres checkpointer on our pool: durable across pools, prepared once, and not
serialised behind one lock (langgraph #7259)."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, TypedDict

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from boundloop.checkpoints import MIGRATIONS, open_pool, postgres_saver

CONFIG = {"configurable": {"thread_id": "t-1"}}


class Tiny(TypedDict):
    n: int
    trail: Annotated[list[str], operator.add]


def _tiny_graph() -> StateGraph:
    """START → add → ask (interrupts for a factor) → END."""

    def add(state: Tiny) -> dict:
        return {"n": state["n"] + 1, "trail": ["add"]}

    def ask(state: Tiny) -> dict:
        factor = interrupt({"question": "factor?"})
        return {"n": state["n"] * factor, "trail": ["ask"]}

    builder = StateGraph(Tiny)
    builder.add_node("add", add)
    builder.add_node("ask", ask)
    builder.add_edge(START, "add")
    builder.add_edge("add", "ask")
    builder.add_edge("ask", END)
    return builder


async def test_an_interrupted_run_resumes_from_a_new_pool(db_url: str) -> None:
    """The checkpoint, not the process, carries the run: a fresh pool resumes and finishes it."""
    async with postgres_saver(db_url) as saver:
        graph = _tiny_graph().compile(checkpointer=saver)
        first = await graph.ainvoke({"n": 1, "trail": []}, CONFIG)
    async with postgres_saver(db_url) as saver:
        graph = _tiny_graph().compile(checkpointer=saver)
        waiting = await graph.aget_state(CONFIG)
        final = await graph.ainvoke(Command(resume=10), CONFIG)
    assert [i.value for i in first["__interrupt__"]] == [{"question": "factor?"}]
    assert waiting.next == ("ask",)
    assert final == {"n": 20, "trail": ["add", "ask"]}


async def test_the_database_gets_langgraph_tables_and_ours(db_url: str) -> None:
    async with postgres_saver(db_url):
        pass
    with psycopg.connect(db_url) as conn:
        tables = {name for (name,) in conn.execute("SELECT tablename FROM pg_tables")}
        (version,) = conn.execute("SELECT max(v) FROM boundloop_migrations").fetchone() or (None,)
    assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes", "boundloop_ledger"} <= tables
    assert version == len(MIGRATIONS) - 1


async def test_concurrent_first_setups_on_one_database_all_succeed(db_url: str) -> None:
    """Four processes opening a fresh database at once: setup runs once at a time."""

    async def open_and_read() -> object:
        async with postgres_saver(db_url) as saver:
            return await saver.aget_tuple(CONFIG)

    async with asyncio.timeout(60):
        assert await asyncio.gather(*(open_and_read() for _ in range(4))) == [None] * 4


async def test_one_saver_answers_a_query_while_a_listing_is_open(db_url: str) -> None:
    """With the stock asyncio.Lock the second query would wait for the listing forever."""
    async with postgres_saver(db_url) as saver:
        await _tiny_graph().compile(checkpointer=saver).ainvoke({"n": 1, "trail": []}, CONFIG)
        listing = saver.alist(CONFIG)
        await anext(listing)  # holds a cursor (and the saver's lock) until the listing ends
        async with asyncio.timeout(10):
            latest = await saver.aget_tuple(CONFIG)
        await listing.aclose()
    assert latest is not None


async def test_a_pool_passed_in_stays_open_after_the_saver(db_url: str) -> None:
    async with await open_pool(db_url) as pool:
        async with postgres_saver(pool) as saver:
            assert isinstance(saver, AsyncPostgresSaver)
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT 1 AS one")).fetchone()
    assert row == {"one": 1}
