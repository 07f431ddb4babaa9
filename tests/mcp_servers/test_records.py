"""The record store keeps records in Postgres, replays keyed writes, and returns what writes replaced."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import psycopg
from mcp import Client

from boundloop.mcp_servers.records.server import ALREADY_EXISTS, KEY_REUSED, NOT_FOUND
from tests.mcp_servers.launch import error_text, hints, http, stdio, structured


@asynccontextmanager
async def records(url: str) -> AsyncIterator[Client]:
    async with stdio("records", "--database-url", url) as (client, _):
        yield client


def row_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM records").fetchone()
    assert row is not None
    count: int = row[0]
    return count


async def test_tools_are_listed_with_their_annotations(records_db_url: str) -> None:
    """Reads are read-only; create is additive; update and delete are destructive; delete is idempotent."""
    async with records(records_db_url) as client:
        tools = (await client.list_tools()).tools
    assert hints(tools) == {
        "create_record": (False, False, False, False),
        "get_record": (True, False, True, False),
        "query_records": (True, False, True, False),
        "update_record": (False, True, False, False),
        "delete_record": (False, True, True, False),
    }
    assert all(tool.title and tool.description and tool.output_schema for tool in tools)


async def test_a_record_is_created_read_queried_updated_and_deleted(records_db_url: str) -> None:
    """The whole life of one record, each step seen by the next."""
    async with records(records_db_url) as client:
        created = structured(await client.call_tool("create_record", {"collection": "orders", "data": {"qty": 2}}))
        read = structured(await client.call_tool("get_record", {"collection": "orders", "id": created["id"]}))
        found = structured(await client.call_tool("query_records", {"collection": "orders", "where": {"qty": 2}}))
        updated = structured(
            await client.call_tool("update_record", {"collection": "orders", "id": created["id"], "data": {"qty": 3}})
        )
        deleted = structured(await client.call_tool("delete_record", {"collection": "orders", "id": created["id"]}))
        gone = await client.call_tool("get_record", {"collection": "orders", "id": created["id"]})
    assert (created["version"], created["data"]) == (1, {"qty": 2})
    assert read == created
    assert found == {"records": [created], "truncated": False}
    assert (updated["record"]["version"], updated["record"]["data"]) == (2, {"qty": 3})
    assert deleted["deleted"] == updated["record"]
    assert error_text(gone) == "Error executing tool get_record: " + NOT_FOUND.format(
        id=created["id"], collection="orders"
    )


async def test_a_missing_record_is_named_by_collection_and_id(records_db_url: str) -> None:
    """The model reads which record was missing and where to look for the right id."""
    async with records(records_db_url) as client:
        result = await client.call_tool("get_record", {"collection": "orders", "id": "nope"})
    assert error_text(result) == (
        "Error executing tool get_record: record 'nope' not found in collection 'orders'; "
        "check the collection and id with query_records"
    )


async def test_create_refuses_an_id_already_taken(records_db_url: str) -> None:
    """A create never overwrites: the second call fails and points at update_record."""
    call = {"collection": "orders", "id": "o-1", "data": {}}
    async with records(records_db_url) as client:
        structured(await client.call_tool("create_record", call))
        again = await client.call_tool("create_record", call)
    assert error_text(again) == "Error executing tool create_record: " + ALREADY_EXISTS.format(
        id="o-1", collection="orders"
    )


async def test_a_replayed_create_returns_the_same_response_and_makes_one_row(records_db_url: str) -> None:
    """The second call with the key changes nothing, even though it asks for a new random id."""
    call = {"collection": "orders", "data": {"qty": 1}, "idempotency_key": "run-1/call-1"}
    async with records(records_db_url) as client:
        first = await client.call_tool("create_record", call)
        replay = await client.call_tool("create_record", call)
    assert replay.structured_content == structured(first)
    assert row_count(records_db_url) == 1


async def test_concurrent_creates_with_one_key_make_one_row(records_db_url: str) -> None:
    """The key is claimed inside the write's transaction, so a racing twin waits and then replays."""
    call = {"collection": "orders", "data": {"qty": 1}, "idempotency_key": "run-1/call-1"}
    responses = []
    async with records(records_db_url) as client:

        async def create() -> None:
            responses.append(structured(await client.call_tool("create_record", call)))

        async with anyio.create_task_group() as calls:
            for _ in range(4):
                calls.start_soon(create)
    assert all(response == responses[0] for response in responses)
    assert row_count(records_db_url) == 1


async def test_a_key_used_by_one_tool_is_refused_by_another(records_db_url: str) -> None:
    """A key names one write; reusing it for another tool is refused and changes nothing."""
    async with records(records_db_url) as client:
        created = structured(
            await client.call_tool("create_record", {"collection": "c", "data": {}, "idempotency_key": "k"})
        )
        reused = await client.call_tool(
            "delete_record", {"collection": "c", "id": created["id"], "idempotency_key": "k"}
        )
    assert error_text(reused) == "Error executing tool delete_record: " + KEY_REUSED.format(
        key="k", used_for="create_record in collection 'c'", tool="delete_record"
    )
    assert row_count(records_db_url) == 1


async def test_a_key_reused_with_another_payload_or_collection_is_refused(records_db_url: str) -> None:
    """A key names one write: the same tool with other data, or in another collection, is refused
    (not answered with the first write's result), and nothing is written; the exact repeat replays."""
    first_call = {"collection": "orders", "id": "o-1", "data": {"qty": 1}, "idempotency_key": "k"}
    async with records(records_db_url) as client:
        first = structured(await client.call_tool("create_record", first_call))
        other_data = await client.call_tool("create_record", {**first_call, "data": {"qty": 999}})
        other_collection = await client.call_tool("create_record", {**first_call, "collection": "payroll"})
        other_id = await client.call_tool("create_record", {**first_call, "id": "o-2"})
        replay = await client.call_tool("create_record", first_call)
        stored = structured(await client.call_tool("get_record", {"collection": "orders", "id": "o-1"}))
    expected = "Error executing tool create_record: " + KEY_REUSED.format(
        key="k", used_for="create_record in collection 'orders' id 'o-1'", tool="create_record"
    )
    assert [error_text(result) for result in (other_data, other_collection, other_id)] == [expected] * 3
    assert replay.structured_content == first and stored["data"] == {"qty": 1}
    assert row_count(records_db_url) == 1


async def test_an_update_key_reused_for_another_patch_is_refused(records_db_url: str) -> None:
    async with records(records_db_url) as client:
        await client.call_tool("create_record", {"collection": "c", "id": "r", "data": {"n": 0}})
        await client.call_tool("update_record", {"collection": "c", "id": "r", "data": {"n": 1}, "idempotency_key": "u"})
        reused = await client.call_tool("update_record", {"collection": "c", "id": "r", "data": {"n": 2}, "idempotency_key": "u"})
        stored = structured(await client.call_tool("get_record", {"collection": "c", "id": "r"}))
    assert error_text(reused).startswith("Error executing tool update_record: idempotency_key 'u' was already used")
    assert stored["data"] == {"n": 1} and stored["version"] == 2


async def test_update_merges_the_patch_and_returns_the_previous_record(records_db_url: str) -> None:
    """Keys given replace, nested objects merge, null removes; `previous` is the record before."""
    data = {"status": "new", "address": {"city": "Oslo", "zip": "0150"}, "note": "call first"}
    patch = {"status": "paid", "address": {"zip": "0151"}, "note": None}
    async with records(records_db_url) as client:
        created = structured(await client.call_tool("create_record", {"collection": "orders", "data": data}))
        updated = structured(
            await client.call_tool("update_record", {"collection": "orders", "id": created["id"], "data": patch})
        )
    assert updated["previous"] == created
    assert updated["record"]["data"] == {"status": "paid", "address": {"city": "Oslo", "zip": "0151"}}


async def test_a_replayed_delete_returns_the_deleted_record_again(records_db_url: str) -> None:
    """Delete with a key can be retried safely: the repeat answers as the first call did."""
    async with records(records_db_url) as client:
        created = structured(await client.call_tool("create_record", {"collection": "c", "data": {"a": 1}}))
        call = {"collection": "c", "id": created["id"], "idempotency_key": "del-1"}
        first = structured(await client.call_tool("delete_record", call))
        replay = structured(await client.call_tool("delete_record", call))
    assert replay == first == {"deleted": created}


async def test_query_matches_top_level_equality_and_reports_truncation(records_db_url: str) -> None:
    """Only records whose fields equal `where` come back, by id, and the cut at `limit` is reported."""
    async with records(records_db_url) as client:
        for number in range(3):
            await client.call_tool(
                "create_record", {"collection": "c", "id": f"r{number}", "data": {"open": True, "n": number}}
            )
        await client.call_tool("create_record", {"collection": "c", "id": "closed", "data": {"open": False}})
        page = structured(
            await client.call_tool("query_records", {"collection": "c", "where": {"open": True}, "limit": 2})
        )
    assert [record["id"] for record in page["records"]] == ["r0", "r1"]
    assert page["truncated"] is True


async def test_records_are_served_over_streamable_http(records_db_url: str) -> None:
    """The same tools answer at /mcp when the server runs with --http."""
    with http("records", "--database-url", records_db_url) as url:
        async with Client(url) as client:
            created = structured(await client.call_tool("create_record", {"collection": "c", "id": "x", "data": {}}))
            read = structured(await client.call_tool("get_record", {"collection": "c", "id": "x"}))
    assert read == created
