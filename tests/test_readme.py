"""Every bash and python block of the READMEs runs as written, with a new user's defaults.

The READMEs are the top-level README.md and every README.md inside the packages and tests/ (found by
glob, so a new package README is covered without a change here). A block is run from a copy of the
clone (the repository's entries, symlinked, `.venv` included): bash blocks with `bash -euo
pipefail`, python blocks as scripts with `.venv/bin/python`. No database URL is set, so boundloop
starts its embedded cluster, in a BOUNDLOOP_HOME of the test's own (the README documents the
variable; the cluster is stopped and deleted afterwards). A block preceded by `<!-- not run: REASON
-->` is skipped — output samples, synopses with placeholders, installs, long-running servers and
benchmarks — and blocks in other languages (json, or none) are data, not commands.
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
PACKAGES = ("graph", "nodes", "tools", "checkpoints", "mcp_servers", "tests")


def readme_files() -> list[Path]:
    """README.md at the top, then every README.md under the packages and tests/, outside hidden and
    vendored folders (tests/.peers holds npm packages with READMEs of their own)."""
    found = {
        path
        for package in PACKAGES
        for path in (REPO / package).rglob("README.md")
        if not any(part.startswith(".") or part == "node_modules" for part in path.relative_to(REPO).parts)
    }
    return [REPO / "README.md", *sorted(found)]


def readme_blocks(readme: Path) -> list[tuple[str, str, str | None]]:
    """(language, body, reason it is not run) of every fenced block of one README, in order."""
    return [(match["language"], match["body"], match["why"]) for match in BLOCK.finditer(readme.read_text())]


def runnable_blocks() -> list[pytest.param]:
    params = []
    for readme in readme_files():
        name = readme.relative_to(REPO).as_posix()
        blocks = [(language, body) for language, body, why in readme_blocks(readme) if language in RUNNABLE and why is None]
        params += [pytest.param(language, body, id=f"{name}:{language}-{number}") for number, (language, body) in enumerate(blocks)]
    return params


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


def test_the_package_readmes_are_found() -> None:
    """The glob finds the reference READMEs beside the code, and none of the vendored ones."""
    names = {readme.relative_to(REPO).as_posix() for readme in readme_files()}
    assert {"README.md", "tools/README.md", "checkpoints/README.md", "graph/evals/README.md", "tests/README.md"} <= names
    assert not any("node_modules" in name or "/." in name for name in names)


@pytest.mark.parametrize("readme", readme_files(), ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_skipped_block_says_why(readme: Path) -> None:
    assert all(why.strip() for _, _, why in readme_blocks(readme) if why is not None)


def test_some_readme_block_is_run() -> None:
    assert runnable_blocks(), "no README block is run at all"


@pytest.mark.parametrize(("language", "body"), runnable_blocks())
def test_the_readme_block_runs_as_written(language: str, body: str, new_user: tuple[Path, dict[str, str]]) -> None:
    clone, env = new_user
    done = subprocess.run([*RUNNABLE[language], body], cwd=clone, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"exit {done.returncode}\n--- block ---\n{body}\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
