"""cli: the `boundloop` command — run, resume, list and inspect runs, and the offline demo.

Every user error ends in one clear message and exit code 2, never a traceback. A run that stops
on an error keeps its last checkpoint, and the message says how to resume it. A command that
drives a run (`run`, `resume`, `approve`, `reject`, `demo`) exits with the code of where the run
stands (graph/core/status.py: 0 success, 3 waiting for a human, 4 to 8 a failure family, 130 or
143 halted by SIGINT or SIGTERM).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from boundloop.graph.core.status import exit_code
from boundloop.graph.models import roles
from boundloop.graph.cli.running import err, guarded, out, with_runner
from boundloop.graph.decisions import decision_from_flags
from boundloop.graph.cli.options import (
    ApprovalTimeoutOpt,
    BaseUrlOpt,
    BudgetOpt,
    ConfigOpt,
    CriteriaOpt,
    CritiqueOpt,
    DbFlag,
    FallbackModelOpt,
    JsonFlag,
    JudgeOpt,
    ModelOpt,
    PlanningOpt,
    PolicyOpt,
    ProfileOpt,
    RoleModelOpt,
    ScriptOpt,
    ServersOpt,
    TargetOpt,
    UnattendedOpt,
    UserOpt,
    WorkspaceOpt,
    check_usable,
    settings_from,
    task_from,
)
from boundloop.graph.cli.progress import Progress, render_pending, render_report, render_runs, render_trace
from boundloop.graph.task import RunSettings, Task
from boundloop.tools import secrets

if TYPE_CHECKING:
    from boundloop.graph.run.runner import RunReport, Runner

app = typer.Typer(help="boundloop: a bounded, durable, permissioned agent loop.", no_args_is_help=True, add_completion=False)


@app.command()
def run(
    goal: Annotated[Optional[str], typer.Argument(help="What the agent should achieve.")] = None,
    task_file: Annotated[Optional[Path], typer.Option("--task", help="A task JSON file (goal, acceptance_criteria, ...).")] = None,
    criteria: CriteriaOpt = [],
    target: TargetOpt = [],
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
    planning: PlanningOpt = None,
    role_model: RoleModelOpt = [],
    fallback_model: FallbackModelOpt = [],
    judge: JudgeOpt = None,
    critique: CritiqueOpt = None,
    thread: Annotated[Optional[str], typer.Option("--thread", help="Run id (thread id) to use.")] = None,
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Start a run and drive it to a terminal status (or to a pending approval)."""
    options = dict(locals())
    guarded(lambda: _run(options))


@app.command()
def demo(as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """Run the shipped offline demo: scripted model, embedded Postgres, the workspace MCP server."""
    guarded(lambda: _demo(as_json, database_url))


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

    guarded(lambda: with_runner(database_url, body))


@app.command()
def runs(limit: int = 50, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """List runs with their status."""

    async def body(runner: Runner) -> None:
        rows = await runner.runs(limit)
        out.print_json(json.dumps(rows, default=str)) if as_json else render_runs(out, rows)

    guarded(lambda: with_runner(database_url, body))


@app.command()
def show(run_id: str, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """Show a run: what it did in one sentence, phase history, budget used against its limits, terminal status and result."""

    async def body(runner: Runner) -> None:
        from boundloop.checkpoints import store
        from boundloop.graph.cli.replay import show_header
        from boundloop.graph.trace.fields import missing_trace_fields

        report, trace = await runner.report(run_id), await runner.trace(run_id)
        sentence, complete = show_header(trace, missing := await missing_trace_fields(runner.pool, run_id))
        head = await store.trace_head(runner.pool, run_id)
        if as_json:
            extra = {"explanation": sentence, "missing_trace_fields": missing, "trace": trace, "trace_head": head}
            out.print_json(json.dumps(secrets.redact(_report_json(report) | extra), default=str))
        else:
            out.print(sentence, highlight=False)
            out.print(complete, highlight=False)
            render_trace(out, trace)
            render_report(out, report)
            if head:
                out.print(f"trace head: {head} (kept elsewhere, `boundloop replay {run_id} --expect-head {head}` shows any rewrite up to here)",
                          highlight=False, soft_wrap=True)

    guarded(lambda: with_runner(database_url, body))


@app.command()
def pending(run_id: Annotated[Optional[str], typer.Argument(help="Only this run.")] = None, as_json: JsonFlag = False, database_url: DbFlag = None) -> None:
    """List approvals waiting for a human, across all runs."""

    async def body(runner: Runner) -> None:
        rows = await runner.pending(run_id)
        out.print_json(json.dumps(rows, default=str)) if as_json else render_pending(out, rows)

    guarded(lambda: with_runner(database_url, body))


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
        decision = decision_from_flags(edit, respond, grant, answer, approver)
        with_runner(database_url, lambda runner: _decide(runner, run_id, call_id, decision, as_json))

    guarded(decide)


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
    guarded(lambda: with_runner(database_url, lambda runner: _decide(runner, run_id, call_id, decision, as_json)))


def _run(options: dict[str, Any]) -> None:
    settings = settings_from(options)
    task = task_from(options)
    check_usable(settings)
    from boundloop.graph.run.runner import new_thread_id  # after the checks: a refused flag does not wait for the graph to load
    thread = options["thread"] or new_thread_id()
    with_runner(
        options["database_url"],
        lambda runner: _drive(runner, runner.start(task, settings, thread_id=thread, observe=_observer(options["as_json"])), options["as_json"]),
        warm=(thread, settings),
    )


def _demo(as_json: bool, database_url: str | None) -> None:
    from boundloop.checkpoints.cluster import state_dir

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
    with_runner(database_url, lambda runner: _drive(runner, runner.start(task, settings, thread_id=thread, observe=_observer(as_json)), as_json),
                install=True, warm=(thread, settings))


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
    from boundloop.graph.models.catalog import model_for

    for each in roles.every_model((await runner.report(run_id)).values.get("settings") or {}):
        model_for(each)


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


import boundloop.graph.cli.workers  # noqa: E402,F401  (registers `submit` and `worker` on `app`)
import boundloop.graph.cli.replay  # noqa: E402,F401  (registers `replay` on `app`)
import boundloop.graph.cli.memory  # noqa: E402,F401  (registers `memory list|show|quarantine|forget|rebuild` on `app`)
import boundloop.graph.cli.console  # noqa: E402,F401  (registers `console` on `app`)
import boundloop.graph.cli.auth  # noqa: E402,F401  (registers `auth` on `app`)
import boundloop.graph.cli.eval  # noqa: E402,F401  (registers `eval` on `app`)
