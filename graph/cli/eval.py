"""cli_eval: `boundloop eval SUITE`, the evaluation metrics (graph/evals/metrics.py) over a suite of scenarios.

`--provider http` runs the suite's golden and fault families through the provider path instead
(graph/evals/provider_server.py); its stored runs are under the suite's name marked `(provider http)`.

Exit codes: 0 every run as its scenario expects and every threshold met; 5 any miss — a threshold,
an expected ending, a golden-path deviation, a replay that differed or is not valid — each printed
on its own line (a CI regression gate; the result-quality code of graph/core/status.py); 2 the
suite file, the `--html` path or the database cannot be used (a bad `--html` path is refused before
any scenario runs). Every run is stored (checkpoints/eval_runs.py) whatever the exit code, and the
`--html` report is written even when the gate fails. Registered on the main `boundloop` app by importing
this module (graph/cli/app.py does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from boundloop.graph.cli.app import DbFlag, JsonFlag, app
from boundloop.graph.cli.running import err, guarded
from boundloop.graph.core.status import Exit
from boundloop.graph.evals import Provider


@app.command("eval")
def eval_suite(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="Suite JSON file, e.g. graph/evals/default.json.")],
    quick: Annotated[bool, typer.Option("--quick", help="Run only the scenarios the suite marks `quick`.")] = False,
    as_json_flag: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the metrics as a Markdown table (the README's).")] = False,
    html: Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Also write the report (metrics, scenarios, plots, trend) "
                                                                            "as one self-contained HTML file.")] = None,
    provider: Annotated[Provider, typer.Option("--provider", help="How scripted scenarios reach their model: `scripted` (in process) or "
                                                                  "`http` (the golden and fault families only, each script served by a local "
                                                                  "OpenAI-compatible server, with its transport faults).")] = "scripted",
    database_url: DbFlag = None,
) -> None:
    """Run a suite of scenarios and print the evaluation metrics; exit 5 on any miss (a threshold, an ending, a golden path, a replay).
    Every run is stored in the database: the console's Evaluation page and the report's trend read it."""
    missed: list[str] = []
    if html is not None and (problem := unwritable(html)):
        err.print(f"[bold red]error:[/bold red] --html {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(Exit.BAD_INPUT)

    def action() -> None:
        from boundloop.graph.cli.evaluate import evaluate  # the harness and the whole graph: loaded by this command only

        missed.extend(evaluate(suite_file, quick=quick, provider=provider, html=html, as_json=as_json_flag, markdown=markdown,
                               database_url=database_url))

    guarded(action)
    if missed:
        raise typer.Exit(Exit.QUALITY)


def unwritable(file: Path) -> str | None:
    """Why the report cannot be written to `file` (checked before any scenario runs), or None."""
    folder = file.parent
    if file.is_dir():
        return f"{str(file)!r} is a directory; give a file path, e.g. {str(file / 'report.html')!r}"
    if not folder.is_dir():
        return f"{str(file)!r}: the directory {str(folder)!r} does not exist; create it or give a path in an existing directory"
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        return f"{str(file)!r} is not writable; give a path you can write to"
    return None
