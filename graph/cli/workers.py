"""cli_workers: `boundloop submit` and `boundloop worker`, the worker pool's commands (graph/run/workers.py,
imported by the commands that use it: Procrastinate is not loaded for every other command).

Registered on the main `boundloop` app by importing this module (graph/cli/app.py does).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from boundloop.checkpoints.queue import HEARTBEAT_S, STALLED_AFTER_S, driven_by_workers
from boundloop.graph.cli.app import app
from boundloop.graph.cli.running import err, guarded, out, with_runner
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
    UnattendedOpt,
    UserOpt,
    WorkspaceOpt,
    check_usable,
    settings_from,
    task_from,
)
from boundloop.graph.core.capacity import MAX_ACTIVE_RUNS
from boundloop.graph.core.errors import ConfigError

if TYPE_CHECKING:
    from boundloop.graph.run.runner import Runner

MAX_CONCURRENCY = MAX_ACTIVE_RUNS
"""Runs one worker process drives at once. Leases share one connection outside the pool, but one
process is one event loop: past a few runs per core, start more processes."""


@app.command()
def submit(
    tasks: Annotated[list[Path], typer.Argument(help="Task JSON files (the `run --task` shape), one run each.", show_default=False)] = [],
    goal: Annotated[list[str], typer.Option("--goal", "-g", help="A goal to run (repeatable), one run each.")] = [],
    criteria: CriteriaOpt = [],
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
    thread: Annotated[Optional[str], typer.Option("--thread", help="Run id (thread id) of the one task submitted.")] = None,
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Queue runs for the worker pool (`boundloop worker`); print each run id and job id."""
    options = dict(locals(), output_schema=None)
    guarded(lambda: _submit(options))


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option("--concurrency", "-n", min=1, max=MAX_CONCURRENCY, help="Runs this process drives at once.")] = 4,
    name: Annotated[Optional[str], typer.Option("--name", help="Worker name shown by `boundloop runs` (default: w<pid>).")] = None,
    stalled_after: Annotated[float, typer.Option(
        "--stalled-after", min=3 * HEARTBEAT_S,
        help="Seconds without a heartbeat after which a worker counts as dead and its runs go to others (the same on every worker).",
    )] = STALLED_AFTER_S,
    database_url: DbFlag = None,
) -> None:
    """Drive queued runs until Ctrl-C or SIGTERM (then finish the runs in flight and stop)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "procrastinate"):  # procrastinate logs every job's arguments (settings, server headers) at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def body() -> None:
        from boundloop.checkpoints.pool import database_url as default_database_url
        from boundloop.graph.run import workers

        url = database_url or default_database_url()
        asyncio.run(workers.work(url, concurrency=concurrency, name=name, stalled_after_s=stalled_after))

    guarded(body)


async def queue_decision(runner: Runner, run_id: str, call_id: str, decision: dict[str, Any], as_json: bool) -> bool:
    """For a run the worker pool drives, queue the decision's continuation and say so; False otherwise."""
    if not await driven_by_workers(runner.pool, run_id):
        return False
    from boundloop.graph.run import workers

    async with workers.opened_queue(runner.pool) as queue:
        job_id = await workers.enqueue_decision(queue, runner, run_id, call_id, decision)
    if as_json:
        out.print_json(json.dumps({"run_id": run_id, "status": "QUEUED", "job_id": job_id}))
    else:
        out.print(f"QUEUED  run {run_id}: a worker continues it (job {job_id})")
    return True


def _submit(options: dict[str, Any]) -> None:
    chosen = [("task_file", path) for path in options["tasks"]] + [("goal", goal) for goal in options["goal"]]
    if not chosen:
        raise ConfigError("nothing to submit: name task files (boundloop submit task.json ...) or goals (--goal TEXT)")
    if options["thread"] and len(chosen) > 1:
        raise ConfigError(f"--thread names one run, but {len(chosen)} tasks were given; submit them without --thread")
    settings = settings_from(options)
    tasks = [task_from({**options, "task_file": None, "goal": None, key: value}) for key, value in chosen]
    check_usable(settings)  # fail now, not in a worker

    async def body(runner: Runner) -> None:
        from boundloop.graph.run import workers

        queued = []
        async with workers.opened_queue(runner.pool) as queue:
            for task in tasks:
                run_id = options["thread"] or f"run-{uuid.uuid4().hex[:12]}"
                queued.append({"run_id": run_id, "job_id": await workers.submit(queue, runner, run_id, task, settings)})
        if options["as_json"]:
            out.print_json(json.dumps(queued))
        else:
            for row in queued:
                out.print(f"QUEUED  {row['run_id']}  (job {row['job_id']})")
            err.print("[dim]start workers with `boundloop worker --concurrency N`; follow them with `boundloop runs`[/dim]")

    with_runner(options["database_url"], body)
