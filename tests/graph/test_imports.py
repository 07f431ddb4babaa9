"""The CLI loads what a command needs: `--help` and a refused flag answer without loading the run's
stack (LangGraph, LangChain, the MCP SDK), and starting or resuming a run never imports the worker
pool's engine (Procrastinate) or the OAuth login's (cryptography, boundloop.tools.oauth)."""

from __future__ import annotations

import json
import subprocess
import sys

ONLY_FOR_OTHER_COMMANDS = ("procrastinate", "boundloop.graph.run.workers", "boundloop.tools.oauth", "cryptography.fernet")
THE_RUNS_STACK = ("langgraph", "langchain_core", "langsmith", "mcp", "openai", "uvicorn", "jinja2")


def _loaded_after(args: list[str], watched: tuple[str, ...]) -> tuple[object, list[str]]:
    """The exit code of `boundloop ARGS` run in a fresh interpreter, and which of `watched` it loaded."""
    probe = (
        "import json, sys\n"
        "from boundloop.graph.cli import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as done:\n"
        f"    print(json.dumps([done.code, sorted(m for m in {watched!r} if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    code, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    return code, loaded


def test_importing_the_cli_leaves_out_the_worker_pool_and_oauth() -> None:
    probe = f"import sys, boundloop.graph.cli.app; print(sorted(m for m in {ONLY_FOR_OTHER_COMMANDS!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_help_and_a_refused_flag_do_not_load_the_runs_stack() -> None:
    for args, code in ((["--help"], 0), (["run", "--help"], 0), (["eval", "--help"], 0), (["memory", "list", "--help"], 0),
                       (["run", "x", "--budget", "model_turns=nan"], 2), (["run", "x", "--profile", "nope"], 2),
                       (["run", "--task", "/nonexistent/task.json"], 2), (["run", "--no-such-flag"], 2)):
        assert _loaded_after(args, THE_RUNS_STACK) == (code, []), args
