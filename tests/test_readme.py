"""Every bash and python block of README.md runs as written, with a new user's defaults.

A block is run from a copy of the clone (the repository's entries, symlinked, `.venv` included):
bash blocks with `bash -euo pipefail`, python blocks as scripts with `.venv/bin/python`. No
database URL is set, so boundloop starts its embedded cluster, in a BOUNDLOOP_HOME of the test's
own (the README documents the variable; the cluster is stopped and deleted afterwards). A block
preceded by `<!-- not run: REASON -->` is skipped — output samples, synopses with placeholders,
installs, long-running servers and benchmarks — and blocks in other languages (json, or none)
are data, not commands.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from boundloop.checkpoints import LocalCluster

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!--\s*not run:(?P<why>[^>]*)-->\s*\n)?^```(?P<language>[\w-]*)\n(?P<body>.*?)^```", re.S | re.M)
RUNNABLE = {"bash": ["bash", "-euo", "pipefail", "-c"], "python": [str(REPO / ".venv" / "bin" / "python"), "-c"]}
NEW_USER_UNSET = ("BOUNDLOOP_DATABASE_URL", "DATABASE_URL", "BOUNDLOOP_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL")
TIMEOUT_S = 300


def readme_blocks() -> list[tuple[str, str, str | None]]:
    """(language, body, reason it is not run) of every fenced block, in order."""
    text = (REPO / "README.md").read_text()
    return [(match["language"], match["body"], match["why"]) for match in BLOCK.finditer(text)]


def runnable_blocks() -> list[pytest.param]:
    blocks = [(language, body) for language, body, why in readme_blocks() if language in RUNNABLE and why is None]
    return [pytest.param(language, body, id=f"{language}-{number}") for number, (language, body) in enumerate(blocks)]


@pytest.fixture
def new_user(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the clone to run in, and the environment of a new user (a fresh BOUNDLOOP_HOME)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git", ".boundloop", ".langgraph_api"):
            (clone / entry.name).symlink_to(entry)
    home = Path(tempfile.mkdtemp(prefix="boundloop-home-"))
    home.chmod(0o755)  # as root, the cluster's unprivileged user must traverse it
    env = {key: value for key, value in os.environ.items() if key not in NEW_USER_UNSET} | {"BOUNDLOOP_HOME": str(home)}
    try:
        yield clone, env
    finally:
        LocalCluster(home / "pgdata").stop()
        shutil.rmtree(home, ignore_errors=True)


def test_every_skipped_block_says_why() -> None:
    assert all(why.strip() for _, _, why in readme_blocks() if why is not None)
    assert runnable_blocks(), "no README block is run at all"


@pytest.mark.parametrize(("language", "body"), runnable_blocks())
def test_the_readme_block_runs_as_written(language: str, body: str, new_user: tuple[Path, dict[str, str]]) -> None:
    clone, env = new_user
    done = subprocess.run([*RUNNABLE[language], body], cwd=clone, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"exit {done.returncode}\n--- block ---\n{body}\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
