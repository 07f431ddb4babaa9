"""cli_memory: `boundloop memory list | show | quarantine | forget | rebuild`, the audit of persistent memory.

Registered on the main `boundloop` app by importing this module (graph/cli/app.py does). Works on
the Postgres store in boundloop's database (graph/context/memory.py); a quarantined memory stays stored,
for audit, but is never recalled. The memory module and the services load inside each command, so
that `boundloop --help` does not load LangChain.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable, Optional

import typer
from rich.markup import escape
from rich.table import Table

from boundloop.graph.cli.app import DbFlag, JsonFlag, app
from boundloop.graph.cli.running import err, guarded, out
from boundloop.graph.core.errors import BoundloopError

if TYPE_CHECKING:
    from boundloop.graph.services import Services

memory_app = typer.Typer(help="Persistent memory: list, show, quarantine, forget, rebuild from a run's trace.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")

KeyArg = Annotated[str, typer.Argument(help="Memory key, as `boundloop memory list` prints it (RUN.N).", show_default=False)]


class MemoryNotFound(BoundloopError):
    def __init__(self, key: str) -> None:
        super().__init__(f"no memory {key!r}; list them with `boundloop memory list`")


@memory_app.command("list")
def list_(
    user: Annotated[Optional[str], typer.Option("--user", help="Only this user's memories.")] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", help="Only this profile's memories (with --user).")] = None,
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """List stored memories, quarantined ones included."""

    async def body(services: Services) -> None:
        from boundloop.graph.context import memory

        items = await memory.list_memories(await memory.store_for(await services.pool()), user=user, profile=profile)
        if as_json:
            out.print_json(json.dumps([{"key": item.key, **item.value} for item in items], default=str))
            return
        table = Table("key", "user", "profile", "status", "expires", "text")
        for item in items:
            value = item.value
            expired = value.get("expires_at", 0) <= time.time()
            status = value.get("status", "?") + (" (expired)" if expired else "")
            table.add_row(item.key, value.get("user"), value.get("profile"), status, _day(value.get("expires_at")), escape(value.get("text", "")[:80]))
        out.print(table)

    guarded(lambda: _with_services(database_url, body))


@memory_app.command()
def show(key: KeyArg, database_url: DbFlag = None) -> None:
    """Show one memory: its text, sources (call ids, payload pointers), validator, status."""

    async def body(services: Services) -> None:
        item = await _item(services, key)
        out.print_json(json.dumps({"key": item.key, "namespace": list(item.namespace), **item.value}, default=str))

    guarded(lambda: _with_services(database_url, body))


@memory_app.command()
def quarantine(key: KeyArg, reason: Annotated[str, typer.Option("--reason", help="Why; kept with the memory.")] = "quarantined by a person",
               database_url: DbFlag = None) -> None:
    """Keep the memory for audit but never recall it again (undo with `memory rebuild RUN`)."""

    async def body(services: Services) -> None:
        from boundloop.graph.context import memory

        item = await _item(services, key)
        await memory.set_status(await memory.store_for(await services.pool()), item, "quarantined", reason)
        out.print(f"quarantined {key}")

    guarded(lambda: _with_services(database_url, body))


@memory_app.command()
def forget(key: KeyArg, database_url: DbFlag = None) -> None:
    """Delete the memory (the trace of the run that wrote it keeps the record)."""

    async def body(services: Services) -> None:
        from boundloop.graph.context import memory

        item = await _item(services, key)
        await (await memory.store_for(await services.pool())).adelete(item.namespace, item.key)
        out.print(f"forgot {key}")

    guarded(lambda: _with_services(database_url, body))


@memory_app.command()
def rebuild(run_id: Annotated[str, typer.Argument(help="The run whose promoted memories to write again.", show_default=False)],
            database_url: DbFlag = None) -> None:
    """Rebuild the memories a run promoted from its trace and stored payloads, each re-verified."""

    async def body(services: Services) -> None:
        from boundloop.graph.context import memory

        pool = await services.pool()
        outcomes = await memory.rebuild(await memory.store_for(pool), pool, run_id)
        if not outcomes:
            err.print(f"[bold red]error:[/bold red] run {escape(run_id)} promoted no memory (no `memory` trace event); nothing to rebuild")
            raise typer.Exit(1)
        for key, problem in outcomes:
            out.print(f"rebuilt {key}" if problem is None else f"not rebuilt {key}: {escape(problem)}")
        if any(problem for _, problem in outcomes):
            raise typer.Exit(1)

    guarded(lambda: _with_services(database_url, body))


async def _item(services: Services, key: str) -> Any:
    from boundloop.graph.context import memory

    item = await memory.find(await memory.store_for(await services.pool()), key)
    if item is None:
        raise MemoryNotFound(key)
    return item


def _day(epoch: Any) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch)) if epoch else "-"


def _with_services(database_url: str | None, body: Callable[[Services], Awaitable[None]]) -> None:
    from boundloop.graph.services import Services

    async def main() -> None:
        services = Services(database_url=database_url)
        try:
            await body(services)
        finally:
            await services.aclose()

    asyncio.run(main())
