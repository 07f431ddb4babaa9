"""running: how every `boundloop` command runs — an error becomes one line and an exit code, and a
command that drives runs holds a Runner whose runs halt, resumable, on Ctrl-C or SIGTERM.

`err` and `out` are the consoles every command prints to.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape

from boundloop.checkpoints.errors import CheckpointsError
from boundloop.graph.core.errors import BoundloopError
from boundloop.graph.core.status import Exit
from boundloop.tools import secrets
from boundloop.tools.errors import ToolsError

if TYPE_CHECKING:
    from boundloop.graph.run.runner import Runner
    from boundloop.graph.task import RunSettings

err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def with_runner(database_url: str | None, body: Any, *, install: bool = False, warm: tuple[str, RunSettings] | None = None) -> None:
    """Run `body(runner)`; a run halted by SIGINT or SIGTERM exits 128 + the signal's number,
    whatever the body would have exited with. `warm`: the run the body starts (`Runner`)."""
    from boundloop.graph.run.runner import Runner

    # psycopg, its pool and the lease log every dropped connection and reconnect attempt; during an
    # outage that is a screenful on stderr. The runner rides the outage out or ends with one line.
    for noisy in ("psycopg", "boundloop.checkpoints.lease"):
        logging.getLogger(noisy).addHandler(logging.NullHandler())
    received: list[int] = []

    async def main() -> None:
        async with Runner(database_url, install_postgres=install, warm=warm) as runner:
            stop_on_signals(runner, received)
            await body(runner)

    try:
        asyncio.run(main())
    except typer.Exit:
        if not received:
            raise
    if received:
        raise typer.Exit(128 + received[0])


def stop_on_signals(runner: Runner, received: list[int]) -> None:
    """Ctrl-C or SIGTERM: halt now, resumable (the call in flight is cancelled). A second signal
    exits at once; every step already saved stays saved, and the ledger reconciles a call cut off
    mid-flight. `received` collects the signals' numbers."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) > 1:
            os._exit(128 + received[0])
        err.print("[yellow]halting: the call in flight is cancelled, saved steps stay saved; press Ctrl-C again to exit at once[/yellow]")
        runner.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)


def guarded(action: Any) -> None:
    try:
        action()
    except (BoundloopError, CheckpointsError, ToolsError) as error:
        err.print(f"[bold red]error:[/bold red] {escape(secrets.redact(str(error)))}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from None
    except Exception as error:
        if not _connection_lost(error):
            raise
        # raised outside a drive, where no call is in flight: nothing changed
        reason = " ".join(secrets.redact(str(error)).split())[:300]
        err.print(f"[bold red]error:[/bold red] database connection lost ({escape(reason)}); nothing was changed: retry when the database is back", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; the run keeps its last checkpoint: continue with `boundloop resume RUN`[/yellow]")
        raise typer.Exit(Exit.SIGINT) from None


def _connection_lost(error: Exception) -> bool:
    """psycopg's lost connection or its pool's timeout. Imported here, so that a command that never
    reached the database (`--help`, a bad flag) does not load psycopg."""
    import psycopg
    from psycopg_pool import PoolTimeout

    return isinstance(error, (psycopg.OperationalError, PoolTimeout))
