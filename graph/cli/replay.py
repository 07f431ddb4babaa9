"""cli_trace: `boundloop replay RUN` — validate a run's recorded trajectory against the compiled graph.

Exit 0 when the trajectory is valid, 5 when replay finds a problem (a check failed; each printed on
its own line), 2 on bad input (no such run); 1 stays an unexpected error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from boundloop.graph.cli.app import DbFlag, JsonFlag, app
from boundloop.graph.cli.running import guarded, out, with_runner
from boundloop.graph.core.errors import RunNotFound
from boundloop.graph.core.status import Exit

if TYPE_CHECKING:
    from boundloop.graph.run.runner import Runner


@app.command()
def replay(
    run_id: str,
    expect_head: Annotated[Optional[str], typer.Option("--expect-head", help="A trace head `show` printed earlier: the trace must still hold it.")] = None,
    as_json: JsonFlag = False,
    database_url: DbFlag = None,
) -> None:
    """Rebuild a run's trajectory from its trace and check it against the graph: every transition
    an edge, no tool call without its permission decision, no side effect without its ledger INTENT,
    the hash chain whole (and holding --expect-head)."""
    valid: list[bool] = []

    async def body(runner: Runner) -> None:
        from boundloop.checkpoints import store
        from boundloop.graph.trace.replay import replay_run

        if not await store.read_trace(runner.pool, run_id):
            raise RunNotFound(f"no trace for run {run_id!r} in this database; list runs with `boundloop runs`")
        report = await replay_run(runner.pool, run_id, runner.graph, expect_head)
        valid.append(report.valid)
        if as_json:
            out.print_json(json.dumps({"run_id": run_id, "valid": report.valid, "problems": report.problems, "transitions": report.transitions}))
            return
        out.print(" → ".join([report.transitions[0][0], *(target for _, target in report.transitions)]) if report.transitions else "(no transitions)")
        for problem in report.problems:
            out.print(f"[red]invalid:[/red] {problem}", highlight=False)
        out.print(f"{len(report.transitions)} transitions; trajectory {'valid' if report.valid else 'INVALID'}")

    guarded(lambda: with_runner(database_url, body))
    if valid and not valid[0]:
        raise typer.Exit(Exit.QUALITY)


def show_header(events: list[dict[str, Any]], missing: list[str]) -> list[str]:
    """The lines `show` starts with: the one-sentence explanation and what the trace lacks."""
    from boundloop.graph.trace.explain import explain

    return [explain(events), f"trace complete: {'yes' if not missing else 'no, missing ' + ', '.join(missing)}"]
