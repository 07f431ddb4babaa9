"""Fixtures for the server tests: a real `langgraph dev` on our langgraph.json, started with the
README's own command and a new user's defaults.

The command is read from the README (its `langgraph dev` block), only the port is changed. No
database URL is set: the server uses the embedded cluster, which this module gets in a
BOUNDLOOP_HOME of its own (a variable the README documents), stopped and deleted afterwards.

The server runs from a temporary project directory: our langgraph.json, copied as it is, next to
symlinks to the repository's top-level entries. Its relative paths (`./graph/server.py`,
`./checkpoints/server.py`, `dependencies: ["."]`) resolve exactly as they do from the repo root,
while everything the server writes into its working directory (`.langgraph_api/`) lands in the
temporary directory, and the MCP servers' logs in the BOUNDLOOP_HOME. So no run of these tests reads a
developer's own `langgraph dev` state, or leaves anything in the work tree.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from boundloop.checkpoints import LocalCluster
from tests.tools._procs import descendants, is_alive, wait_gone

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0  # the first start also creates the embedded cluster
STOP_TIMEOUT_S = 15.0
NEW_USER_UNSET = ("BOUNDLOOP_DATABASE_URL", "DATABASE_URL", "BOUNDLOOP_HOME")
"""A developer's own settings that a new user does not have."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_API_URL = re.compile(r"API: (http://127\.0\.0\.1:(\d+))")
_PORT_TAKEN = re.compile(r"Port (\d+) is already in use, using port (\d+) instead")


@dataclass
class DevServer:
    """A running `langgraph dev`: where it answers, and everything it has logged so far."""

    url: str
    process: subprocess.Popen[str]
    project: Path
    lines: list[str] = field(default_factory=list)
    home: Path | None = None
    """The BOUNDLOOP_HOME the server runs with."""

    def log(self, last: int = 40) -> str:
        return "\n".join(self.lines[-last:])

    @property
    def database_url(self) -> str:
        """The embedded cluster the server uses (started by the server itself)."""
        assert self.home is not None
        return LocalCluster(self.home / "pgdata").url()

    def mcp_servers(self) -> dict[int, str]:
        """MCP server processes the server has started and that are still running."""
        return {pid: cmd for pid, cmd in descendants(self.process.pid).items() if "mcp_servers." in cmd or "probe_server.py" in cmd}


def readme_server_command(port: int) -> tuple[dict[str, str], list[str]]:
    """The README's `langgraph dev` command (its variables, its argv) with `port` for its port."""
    text = (REPO / "README.md").read_text()
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "langgraph dev" in b]
    words = shlex.split(block.replace("\\\n", " "))
    env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
    argv = [word for word in words if word not in {f"{k}={v}" for k, v in env.items()}]
    argv = [str(port) if previous == "--port" else word for previous, word in zip(["", *argv], argv)]
    argv[0] = str(REPO / argv[0])  # `.venv/bin/langgraph`, relative to the clone
    return env, argv


@pytest.fixture(scope="module")
def boundloop_home() -> Iterator[Path]:
    """A BOUNDLOOP_HOME for this module; its embedded cluster is stopped and deleted afterwards."""
    home = Path(tempfile.mkdtemp(prefix="boundloop-home-"))
    home.chmod(0o755)  # as root, the cluster's unprivileged user must traverse it
    try:
        yield home
    finally:
        LocalCluster(home / "pgdata").stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def start_dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path], DevServer]]:
    """`start(home)`: a README `langgraph dev` with BOUNDLOOP_HOME=home, in a project directory of
    its own; every server started is stopped with its whole process tree afterwards."""
    with _servers(tmp_path_factory) as start:
        yield start


@pytest.fixture
async def client(langgraph_dev: DevServer) -> AsyncIterator[LangGraphClient]:
    """An SDK client of the module's server."""
    sdk = get_client(url=langgraph_dev.url, timeout=httpx.Timeout(120.0))
    try:
        yield sdk
    finally:
        await sdk.aclose()


@pytest.fixture(scope="module")
def langgraph_dev(start_dev_server: Callable[[Path], DevServer], boundloop_home: Path) -> DevServer:
    """The module's `langgraph dev`."""
    return start_dev_server(boundloop_home)


@contextmanager
def _servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path], DevServer]]:
    started: list[tuple[subprocess.Popen[str], threading.Thread]] = []

    def start(home: Path) -> DevServer:
        project = _project_dir(tmp_path_factory.mktemp("langgraph-dev"))
        port = _free_port()
        variables, command = readme_server_command(port)
        env = {key: value for key, value in os.environ.items() if key not in NEW_USER_UNSET}
        env |= variables | {"BOUNDLOOP_HOME": str(home)}
        process = subprocess.Popen(
            command, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
        )
        lines: list[str] = []
        changed = threading.Condition()
        reader = threading.Thread(target=_read_lines, args=(process, lines, changed), daemon=True)
        reader.start()
        started.append((process, reader))
        server = DevServer("", process, project, lines, home)
        server.url = _wait_ready(server, port, changed)
        return server

    try:
        yield start
    finally:
        for process, reader in reversed(started):
            _stop(process)
            reader.join(timeout=STOP_TIMEOUT_S)


def _project_dir(project: Path) -> Path:
    """langgraph.json (a copy) beside symlinks to the repository's other top-level entries."""
    shutil.copy2(REPO / "langgraph.json", project / "langgraph.json")
    for entry in REPO.iterdir():
        if not entry.name.startswith(".") and entry.name != "langgraph.json":
            (project / entry.name).symlink_to(entry)
    return project


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _read_lines(process: subprocess.Popen[str], lines: list[str], changed: threading.Condition) -> None:
    """Drain the server's output (so its pipe never fills) and wake the waiter on every line."""
    assert process.stdout is not None
    for raw in process.stdout:
        with changed:
            lines.append(_ANSI.sub("", raw.rstrip("\n")))
            changed.notify_all()
    with changed:
        changed.notify_all()


def _wait_ready(server: DevServer, requested: int, changed: threading.Condition) -> str:
    """The URL the server answers on, once GET /ok says 200.

    The port is read from the server's banner, not assumed: `langgraph dev` does not fail on a
    taken port, it logs "Port N is already in use, using port M instead" and serves on M. Our
    port was free a moment ago, so M is only accepted together with that line.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    url = None
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                pytest.fail(f"langgraph dev exited with {server.process.returncode} before it was ready:\n{server.log()}")
            if url is None:
                url = _announced_url(server.lines, requested)
            if url is not None:
                try:
                    if http.get(f"{url}/ok").status_code == 200:
                        return url
                except httpx.TransportError:
                    pass
            with changed:  # wake on the next log line, or retry /ok shortly
                changed.wait(timeout=0.1)
    pytest.fail(f"langgraph dev was not ready within {READY_TIMEOUT_S:g} s (url: {url}):\n{server.log()}")


def _announced_url(lines: list[str], requested: int) -> str | None:
    for line in list(lines):
        if match := _API_URL.search(line):
            url, port = match.group(1), int(match.group(2))
            moved = [m for m in map(_PORT_TAKEN.search, lines) if m]
            allowed = {requested} | {int(m.group(2)) for m in moved if int(m.group(1)) == requested}
            assert port in allowed, f"langgraph dev serves on {port}, asked for {requested}:\n" + "\n".join(lines)
            return url
    return None


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM the server's process group (SIGKILL if it lingers), reap it, and fail if any
    process it started (MCP servers run in sessions of their own) is still alive."""
    tree = descendants(process.pid)
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)
    survivors = {pid: cmd for pid, cmd in tree.items() if not wait_gone(pid, timeout_s=5.0)}
    survivors |= {pid: "(in the server's process group)" for pid in _group_members(process.pid)}
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not survivors, f"processes started by langgraph dev outlived it: {survivors}"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text(errors="replace")
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[2]) == pgid and is_alive(int(entry)):
                members.append(int(entry))
    return members
