"""cli: the `boundloop` command — run, resume, list and inspect runs, and the offline demo.

Every user error ends in one clear message and exit code 2, never a traceback. A run that stops
on an error keeps its last checkpoint, and the message says how to resume it. A command that
drives a run (`run`, `resume`, `approve`, `reject`, `demo`) exits with the code of where the run
stands (graph/core/status.py: 0 success, 3 waiting for a human, 4 to 8 a failure family, 130 or
143 halted by SIGINT or SIGTERM).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import uuid
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Optional

import psycopg
import typer
from psycopg_pool import PoolTimeout
from rich.console import Console
from rich.markup import escape

from boundloop.checkpoints.cluster import state_dir
from boundloop.checkpoints.errors import CheckpointsError
from boundloop.graph.core.errors import BoundloopError, ConfigError
from boundloop.graph.core.status import Exit, exit_code
from boundloop.graph.models.catalog import model_for
from boundloop.graph.cli.options import (
    ApprovalTimeoutOpt,
    BaseUrlOpt,
    BudgetOpt,
    ConfigOpt,
    CriteriaOpt,
    DbFlag,
    JsonFlag,
    ModelOpt,
    PolicyOpt,
    ProfileOpt,
    ScriptOpt,
    ServersOpt,
    UnattendedOpt,
    UserOpt,
    WorkspaceOpt,
    budget_overrides,
    check_usable,
    settings_from,
    task_from,
)
from boundloop.graph.cli.progress import Progress, render_pending, render_report, render_runs, render_trace
from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.task import RunSettings, Task
from boundloop.tools import secrets
from boundloop.tools.errors import ToolsError

app = typer.Typer(help="boundloop: a bounded, durable, permissioned agent loop.", no_args_is_help=True, add_completion=False)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


@app.command()
def run(
    goal: Annotated[Optional[str], typer.Argument(help="What the agent should achieve.")] = None,
    task_file: Annotated[Optional[Path], typer.Option("--task", help="A task JSON file (goal, acceptance_criteria, ...).")] = None,
    criteria: CriteriaOpt = [],
    output_schema: Annotated[Optional[Path], typer.Option("--output-schema", help="JSON schema file the answer must satisfy.")] = None,
    profile: ProfileOpt = None,
    budget: BudgetOpt = [],
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    script: ScriptOpt = None,
    config: ConfigOpt = None,
    workspace: WorkspaceOpt = None,
    servers: ServersOpt = None,
    policy: PolicyOpt = None,
    unattended: UnattendedOpt = False,
    approval_timeout: ApprovalTimeoutOpt = None,
    user: UserOpt = None,
    thread: Annotated[Optional[str], typer.Option("--thread", help="Run id (thread id) to use.")] = None,
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Start a run and drive it to a terminal status (or to a pending approval)."""
    options = dict(locals())
    _guarded(lambda: _run(options))


@app.command()
def demo(as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """Run the shipped offline demo: scripted model, embedded Postgres, the workspace MCP server."""
    _guarded(lambda: _demo(as_json, database_url))


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue.")],
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Continue a run from its last checkpoint (after a crash, a kill, or a decision made elsewhere)."""
    async def body(runner: Runner) -> None:
        await _model_usable(runner, run_id)
        await _drive(runner, runner.resume(run_id, observe=_observer(as_json)), as_json)

    _guarded(lambda: _with_runner(database_url, body))


@app.command()
def runs(limit: int = 50, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """List runs with their status."""

    async def body(runner: Runner) -> None:
        rows = await runner.runs(limit)
        out.print_json(json.dumps(rows, default=str)) if as_json else render_runs(out, rows)

    _guarded(lambda: _with_runner(database_url, body))


@app.command()
def show(run_id: str, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """Show a run: what it did in one sentence, phase history, budget used against its limits, terminal status and result."""

    async def body(runner: Runner) -> None:
        from boundloop.graph.cli.replay import show_header
        from boundloop.graph.trace.fields import missing_trace_fields

        report, trace = await runner.report(run_id), await runner.trace(run_id)
        sentence, complete = show_header(trace, missing := await missing_trace_fields(runner.pool, run_id))
        if as_json:
            extra = {"explanation": sentence, "missing_trace_fields": missing, "trace": trace}
            out.print_json(json.dumps(secrets.redact(_report_json(report) | extra), default=str))
        else:
            out.print(sentence, highlight=False)
            out.print(complete, highlight=False)
            render_trace(out, trace)
            render_report(out, report)

    _guarded(lambda: _with_runner(database_url, body))


@app.command()
def pending(run_id: Annotated[Optional[str], typer.Argument(help="Only this run.")] = None, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """List approvals waiting for a human, across all runs."""

    async def body(runner: Runner) -> None:
        rows = await runner.pending(run_id)
        out.print_json(json.dumps(rows, default=str)) if as_json else render_pending(out, rows)

    _guarded(lambda: _with_runner(database_url, body))


@app.command()
def approve(
    run_id: str,
    call_id: str,
    edit: Annotated[Optional[str], typer.Option("--edit", help="Run with these arguments instead (JSON); re-validated and re-checked by policy.")] = None,
    respond: Annotated[Optional[str], typer.Option("--respond", help="Do not run the tool; give the model this result.")] = None,
    grant: Annotated[list[str], typer.Option("--grant", help="Budget extension: a new limit, e.g. tool_calls=60 (repeatable).")] = [],
    answer: Annotated[Optional[str], typer.Option("--answer", help="Answer to a question the run asked (missing information).")] = None,
    approver: Annotated[str, typer.Option("--as", help="Who approves (recorded).")] = os.environ.get("USER", "cli"),
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Approve what a run waits for — a call (or edit it, or answer for it), a plan, a result, a budget
    extension (--grant), a question (--answer) — then continue the run."""

    def decide() -> None:
        decision = _approval(edit, respond, grant, answer, approver)
        _with_runner(database_url, lambda runner: _decide(runner, run_id, call_id, decision, as_json))

    _guarded(decide)


@app.command()
def reject(
    run_id: str,
    call_id: str,
    message: Annotated[str, typer.Option("--message", "-m", help="Why; the model reads it.")] = "rejected",
    approver: Annotated[str, typer.Option("--as", help="Who rejects (recorded).")] = os.environ.get("USER", "cli"),
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Reject a waiting call with a message the model sees, then continue the run."""
    decision = {"decision": "reject", "message": message, "approver": approver}
    _guarded(lambda: _with_runner(database_url, lambda runner: _decide(runner, run_id, call_id, decision, as_json)))


def _approval(edit: str | None, respond: str | None, grant: list[str], answer: str | None, approver: str) -> dict[str, Any]:
    """The decision `approve` sends, from its flags (at most one of them)."""
    given = [flag for flag, value in (("--edit", edit), ("--respond", respond), ("--grant", grant), ("--answer", answer)) if value]
    if len(given) > 1:
        raise ConfigError(f"approve takes one of --edit, --respond, --grant, --answer (got {' and '.join(given)})")
    if edit is not None:
        arguments = _parse_json(edit, "--edit")
        if not isinstance(arguments, dict):
            raise ConfigError(f"--edit must be a JSON object of arguments (got {type(arguments).__name__}); e.g. --edit '{{\"path\": \"a.md\"}}'")
        return {"decision": "edit", "args": arguments, "approver": approver}
    if respond is not None:
        return {"decision": "respond", "result": respond, "approver": approver}
    if grant:
        return {"decision": "approve", "grant": budget_overrides(grant), "approver": approver}
    if answer is not None:
        return {"decision": "approve", "answer": answer, "approver": approver}
    return {"decision": "approve", "approver": approver}


def _parse_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{flag} is not valid JSON ({error.msg} at column {error.colno}); e.g. {flag} '{{\"path\": \"a.md\"}}'") from None


def _run(options: dict[str, Any]) -> None:
    settings = settings_from(options)
    task = task_from(options)
    check_usable(settings)
    _with_runner(
        options["database_url"],
        lambda runner: _drive(runner, runner.start(task, settings, thread_id=options["thread"], observe=_observer(options["as_json"])), options["as_json"]),
    )


def _demo(as_json: bool, database_url: str | None) -> None:
    bundled = resources.files("boundloop.graph") / "scripts"
    thread = f"demo-{uuid.uuid4().hex[:8]}"
    workspace = state_dir() / "workspaces" / thread
    for name, content in json.loads((bundled / "demo.workspace.json").read_text()).items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(content)
    task = Task.model_validate_json((bundled / "demo.task.json").read_text())
    settings = RunSettings(model="scripted", script=str(bundled / "demo.json"), workspace_root=str(workspace.resolve()))
    if not as_json:
        err.print(f"[dim]demo workspace: {workspace}[/dim]")
    _with_runner(database_url, lambda runner: _drive(runner, runner.start(task, settings, thread_id=thread, observe=_observer(as_json)), as_json), install=True)


def _observer(as_json: bool) -> Any:
    return None if as_json else Progress(err)


async def _drive(runner: Runner, started: Any, as_json: bool) -> None:
    """Print where the run stands once it stops, and exit with its ending's code (graph/core/status.py)."""
    from boundloop.graph.cli.approvals import ask_decisions

    at_terminal = not as_json and sys.stdin.isatty()
    report: RunReport = await started
    while report.waiting and at_terminal:
        report = await runner.resume(report.thread_id, decisions=ask_decisions(report.interrupts), observe=_observer(as_json))
    if as_json:
        out.print_json(json.dumps(secrets.redact(_report_json(report)), default=str))
    else:
        render_report(out, report)
    raise typer.Exit(exit_code(report.status, waiting=report.waiting))


async def _decide(runner: Runner, run_id: str, call_id: str, decision: dict[str, Any], as_json: bool) -> None:
    """Apply a decision here, or, for a run the worker pool drives, queue its continuation for a worker."""
    from boundloop.graph.cli.workers import queue_decision

    await _model_usable(runner, run_id)
    if not await queue_decision(runner, run_id, call_id, decision, as_json):
        await _drive(runner, runner.decide(run_id, call_id, decision, observe=_observer(as_json)), as_json)


async def _model_usable(runner: Runner, run_id: str) -> None:
    """Refuse before a decision is used or a step runs when the run's model cannot be built here
    (its key file gone, say): the run keeps waiting, nothing is spent."""
    model_for((await runner.report(run_id)).values.get("settings") or {})


def _report_json(report: RunReport) -> dict[str, Any]:
    values = report.values
    return {
        "run_id": report.thread_id,
        "status": report.status,
        "result": values.get("result"),
        "usage": values.get("usage"),
        "budget": values.get("budget"),
        "ending": values.get("ending"),
        "interrupts": report.interrupts,
    }


def _with_runner(database_url: str | None, body: Any, *, install: bool = False) -> None:
    """Run `body(runner)`; a run halted by SIGINT or SIGTERM exits 128 + the signal's number,
    whatever the body would have exited with."""
    # psycopg, its pool and the lease log every dropped connection and reconnect attempt; during an
    # outage that is a screenful on stderr. The runner rides the outage out or ends with one line.
    for noisy in ("psycopg", "boundloop.checkpoints.lease"):
        logging.getLogger(noisy).addHandler(logging.NullHandler())
    received: list[int] = []

    async def main() -> None:
        async with Runner(database_url, install_postgres=install) as runner:
            _stop_on_signals(runner, received)
            await body(runner)

    try:
        asyncio.run(main())
    except typer.Exit:
        if not received:
            raise
    if received:
        raise typer.Exit(128 + received[0])


def _stop_on_signals(runner: Runner, received: list[int]) -> None:
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


def _guarded(action: Any) -> None:
    try:
        action()
    except (BoundloopError, CheckpointsError, ToolsError) as error:
        err.print(f"[bold red]error:[/bold red] {escape(secrets.redact(str(error)))}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from None
    except (psycopg.OperationalError, PoolTimeout) as error:  # outside a drive: nothing was in flight
        reason = " ".join(secrets.redact(str(error)).split())[:300]
        err.print(f"[bold red]error:[/bold red] database connection lost ({escape(reason)}); nothing was changed: retry when the database is back", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; the run keeps its last checkpoint: continue with `boundloop resume RUN`[/yellow]")
        raise typer.Exit(Exit.SIGINT) from None


import boundloop.graph.cli.workers  # noqa: E402,F401  (registers `submit` and `worker` on `app`)
import boundloop.graph.cli.replay  # noqa: E402,F401  (registers `replay` on `app`)
import boundloop.graph.cli.memory  # noqa: E402,F401  (registers `memory list|show|quarantine|forget|rebuild` on `app`)
import boundloop.graph.cli.console  # noqa: E402,F401  (registers `console` on `app`)
import boundloop.graph.cli.auth  # noqa: E402,F401  (registers `auth` on `app`)
import boundloop.graph.cli.eval  # noqa: E402,F401  (registers `eval` on `app`)
