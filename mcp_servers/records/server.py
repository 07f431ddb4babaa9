"""server: the records MCP server, a small Postgres-backed record store standing in for business systems.

Owns the tool surface (names, titles, descriptions, parameters, annotations), the connection pool's
life, and the rule that each call is one transaction, idempotency-key claim included. Never writes
SQL itself (`store` does) and never creates tables outside startup (`schema` does).

No `from __future__ import annotations` here: the SDK reads each tool's annotations at registration.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar
from uuid import uuid4

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from boundloop.mcp_servers._shipped import ShippedServer
from boundloop.mcp_servers.records import store
from boundloop.mcp_servers.records.models import Deleted, Record, RecordPage, Updated
from boundloop.mcp_servers.records.patch import merge_patch
from boundloop.mcp_servers.records.schema import ensure_schema

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# Without a key a repeated create makes a second record, so create is not idempotent as a tool.
CREATES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
OVERWRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
REMOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

NOT_FOUND = "record {id!r} not found in collection {collection!r}; check the collection and id with query_records"
ALREADY_EXISTS = (
    "record {id!r} already exists in collection {collection!r}; "
    "use update_record to change it, or omit id to create a new record"
)
KEY_REUSED = (
    "idempotency_key {key!r} was already used for a different write ({used_for}); "
    "use a new key for this {tool} call, or repeat the first call exactly to get its result"
)

Collection = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="Collection name, e.g. 'orders'.",
        json_schema_extra={"x-boundloop-resource": "collection"},  # policy rules match it as a resource
    ),
]
RecordId = Annotated[str, Field(min_length=1, max_length=200, description="Record id within the collection.")]
IdempotencyKey = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=200,
        description="Names this write: a repeat with the same key returns the first response and changes nothing.",
    ),
]

Result = TypeVar("Result", bound=BaseModel)


def build_server(database_url: str) -> MCPServer:
    """A records server on `database_url`; it creates its tables at startup if they are missing."""
    pool = AsyncConnectionPool(database_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        async with await AsyncConnection.connect(database_url, autocommit=True) as conn:
            await ensure_schema(conn)
        await pool.open(wait=True)
        try:
            yield
        finally:
            await pool.close()

    mcp = ShippedServer(
        "boundloop-records",
        instructions=(
            "A record store: JSON objects in named collections, addressed by (collection, id). "
            "Writes accept an idempotency_key and return what they replaced or removed, so they can be undone."
        ),
        lifespan=lifespan,
    )

    async def write(
        request: dict[str, Any], key: str | None, step: Callable[[AsyncConnection], Awaitable[Result]], result: type[Result]
    ) -> Result:
        """Run `step` in one transaction; with a key, claim it first and store the response with the write.

        `request` is the tool and its arguments: a key names one write, so a repeat of that write
        gets the first response and anything else under the same key is refused (KEY_REUSED)."""
        async with pool.connection() as conn, conn.transaction():
            if key is not None and (stored := await store.claim(conn, key, request)) is not None:
                first, response = stored
                legacy = set(first) == {"tool"}  # an entry that kept only the tool: only the tool can be compared
                if (first["tool"] != request["tool"]) if legacy else (first != request):
                    raise ToolError(KEY_REUSED.format(key=key, used_for=_describe(first), tool=request["tool"]))
                return result.model_validate(response)
            written = await step(conn)
            if key is not None:
                await store.remember(conn, key, written.model_dump(mode="json"))
            return written

    @mcp.tool(title="Create a record", annotations=CREATES)
    async def create_record(
        collection: Collection,
        data: Annotated[dict[str, Any], Field(description="The record's JSON object.")],
        id: Annotated[
            str | None, Field(min_length=1, max_length=200, description="Id to create; omit for a new random id.")
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Record:
        """Create a record in a collection and return it (version 1).

        Fails if the id is already taken in that collection. Undo with delete_record.
        """

        async def step(conn: AsyncConnection) -> Record:
            record_id = id or uuid4().hex
            record = await store.insert(conn, collection, record_id, data)
            if record is None:
                raise ToolError(ALREADY_EXISTS.format(id=record_id, collection=collection))
            return record

        request = {"tool": "create_record", "collection": collection, "id": id, "data": data}
        return await write(request, idempotency_key, step, Record)

    @mcp.tool(title="Get a record", annotations=READ_ONLY)
    async def get_record(collection: Collection, id: RecordId) -> Record:
        """Return one record by collection and id; fails if there is none."""
        async with pool.connection() as conn:
            record = await store.fetch(conn, collection, id)
        if record is None:
            raise ToolError(NOT_FOUND.format(id=id, collection=collection))
        return record

    @mcp.tool(title="Query records", annotations=READ_ONLY)
    async def query_records(
        collection: Collection,
        where: Annotated[
            dict[str, Any],
            Field(
                default_factory=dict,
                description="Top-level keys and the exact JSON values they must equal; {} matches every record.",
            ),
        ],
        limit: Annotated[int, Field(ge=1, le=500, description="Most records to return.")] = 50,
    ) -> RecordPage:
        """List the records of a collection whose top-level fields equal the values in `where`, sorted by id.

        Equality only (no ranges or nested paths). Returns at most `limit` records; `truncated` says
        there were more.
        """
        async with pool.connection() as conn:
            records = await store.select(conn, collection, where, limit + 1)
        return RecordPage(records=records[:limit], truncated=len(records) > limit)

    @mcp.tool(title="Update a record", annotations=OVERWRITES)
    async def update_record(
        collection: Collection,
        id: RecordId,
        data: Annotated[
            dict[str, Any],
            Field(description="JSON merge patch (RFC 7386): keys given replace, nested objects merge, null removes."),
        ],
        idempotency_key: IdempotencyKey = None,
    ) -> Updated:
        """Merge `data` into a record's data, bump its version, and return the record before and after.

        Fails if the record does not exist. To undo, patch the changed keys back to their values in
        `previous.data` (null for keys this update added).
        """

        async def step(conn: AsyncConnection) -> Updated:
            previous = await store.fetch(conn, collection, id, lock=True)
            if previous is None:
                raise ToolError(NOT_FOUND.format(id=id, collection=collection))
            record = await store.replace_data(conn, collection, id, merge_patch(previous.data, data))
            assert record is not None, "the row is locked FOR UPDATE in this transaction"
            return Updated(record=record, previous=previous)

        request = {"tool": "update_record", "collection": collection, "id": id, "data": data}
        return await write(request, idempotency_key, step, Updated)

    @mcp.tool(title="Delete a record", annotations=REMOVES)
    async def delete_record(collection: Collection, id: RecordId, idempotency_key: IdempotencyKey = None) -> Deleted:
        """Delete a record and return it as it was, so it can be recreated with create_record.

        Fails if the record does not exist (with an idempotency_key, a repeat returns the first result).
        """

        async def step(conn: AsyncConnection) -> Deleted:
            record = await store.delete(conn, collection, id)
            if record is None:
                raise ToolError(NOT_FOUND.format(id=id, collection=collection))
            return Deleted(deleted=record)

        request = {"tool": "delete_record", "collection": collection, "id": id}
        return await write(request, idempotency_key, step, Deleted)

    return mcp


def _describe(request: dict[str, Any]) -> str:
    """The first use of a key, for the refusal: tool, collection and id when known."""
    where = f" in collection {request['collection']!r}" if "collection" in request else ""
    which = f" id {request['id']!r}" if request.get("id") else ""
    return f"{request['tool']}{where}{which}"
