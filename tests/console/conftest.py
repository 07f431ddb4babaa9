"""Fixtures for the web console: the console served by uvicorn on a real port, on a database of
this module, with its own event loop in a thread; runs started in that loop; and Debian's
Chromium driven by Playwright (tests/run.sh installs `chromium` when missing, as root)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn

from boundloop.graph.console import ConsoleSettings, create_app
from boundloop.graph.run.runner import RunReport, Runner
from boundloop.graph.task import RunSettings, Task
from tests.conftest import fresh_database
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
APPROVER = "ana"
DELETE = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}
LIST = {"name": "workspace__list_files", "args": {}}
ASK = {"name": "asking__ask", "args": {}}
ASKING_SERVERS = {"mcpServers": {"asking": {"command": sys.executable, "args": [str(Path(__file__).parents[1] / "tools" / "servers" / "asking_server.py")],
                                            "trusted": True, "protocol": "legacy"}}}
T = TypeVar("T")


class LiveConsole:
    """The console on 127.0.0.1:port, its event loop in a thread of its own."""

    def __init__(self, database_url: str) -> None:
        self.app = create_app(ConsoleSettings(database_url=database_url, approver=APPROVER))
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="console", daemon=True)
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))  # port 0: no free-port race
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))

    def start(self) -> None:
        self._thread.start()
        self._serving: Future[None] = asyncio.run_coroutine_threadsafe(self._server.serve(sockets=[self._socket]), self.loop)
        self.call(self._started)

    async def _started(self) -> None:
        while not self._server.started:
            await asyncio.sleep(0.01)

    def call(self, body: Callable[[], Awaitable[T]], timeout_s: float = 60.0) -> T:
        """Run a coroutine in the console's loop (where its runner and pool live) and wait for it."""
        return asyncio.run_coroutine_threadsafe(body(), self.loop).result(timeout_s)

    async def runner(self) -> Runner:
        return await self.app.state.console.runner()

    def stop(self) -> None:
        self._server.should_exit = True
        self._serving.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def live_console(pg_admin_url: str) -> Iterator[LiveConsole]:
    with fresh_database(pg_admin_url, prefix="console") as url:
        console = LiveConsole(url)
        console.start()
        try:
            yield console
        finally:
            console.stop()


@pytest.fixture(scope="module")
def waiting_runs(live_console: LiveConsole, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunReport]:
    """Scripted runs, started together by the console's runner, each on a workspace of its own
    (notes.md, other.md). list, approve, reject, tamper, edit: each waits for approval to delete
    notes.md; extend waits for a budget extension (one tool call allowed, two needed); ask waits
    for missing information; elicit waits for an answer to an MCP server's question. Each plans and is
    critiqued, as its script says: the pages show every phase."""
    asks_to_delete = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE]), step("done")], "critic": [CRITIC_PASS]}
    runs_out = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[LIST]), step(calls=[LIST]), step("done")], "critic": [CRITIC_PASS]}
    blocked = step({"steps": [], "blocked": {"code": "MISSING_INFO", "reason": "which file should I summarize?"}})
    asks = {"planner": [blocked, PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("done")], "critic": [CRITIC_PASS]}
    elicits = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[ASK]), step("done")], "critic": [CRITIC_PASS]}
    scripts: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]] = {
        **{name: (asks_to_delete, {}, None) for name in ("list", "approve", "reject", "tamper", "edit")},
        "extend": (runs_out, {"budget": {"tool_calls": 1}}, None),
        "ask": (asks, {}, None),
        "elicit": (elicits, {}, ASKING_SERVERS),
    }

    async def start(name: str) -> RunReport:
        roles, task, servers = scripts[name]
        workspace = tmp_path_factory.mktemp(name)
        (workspace / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
        (workspace / "other.md").write_text("Other notes\n")
        script = workspace.with_suffix(".script.json")
        script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
        settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace), planning="always", critique="always",
                               **({"servers": servers} if servers else {}))
        return await (await live_console.runner()).start(Task.model_validate({"goal": "Summarize notes.md", **task}), settings)

    async def start_all() -> list[RunReport]:
        return await asyncio.gather(*(start(name) for name in scripts))

    return dict(zip(scripts, live_console.call(start_all, timeout_s=120)))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright; the module skips when it is not installed."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: run the tests with `bash tests/run.sh` as root (it installs Debian's chromium), "
                    "or `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()
