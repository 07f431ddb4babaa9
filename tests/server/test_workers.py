"""Two `langgraph dev` workers on one database (graph/README.md, "Several workers"): a thread waits
on one and is approved and finished on the other, its tool servers following it; and a thread
one worker drives is not driven by the other."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step, workspace  # noqa: F401  (fixture)
from tests.server.conftest import DevServer
from tests.tools._procs import wait_gone
from tests.server.test_serving import GRAPH, SLOW_RUN, servers_of, settings, until_next

WRITE = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "Ana publishes the notes."}}


@pytest.fixture(scope="module")
def workers(start_dev_server: Callable[[Path], DevServer], boundloop_home: Path) -> tuple[DevServer, DevServer]:
    """Two servers with the same BOUNDLOOP_HOME: the second reuses the cluster the first started."""
    return start_dev_server(boundloop_home), start_dev_server(boundloop_home)


@pytest.fixture
async def clients(workers: tuple[DevServer, DevServer]) -> AsyncIterator[tuple[LangGraphClient, LangGraphClient]]:
    first, second = (get_client(url=server.url, timeout=httpx.Timeout(120.0)) for server in workers)
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


async def _waiting_write(client: LangGraphClient, tmp_path: Path, workspace: Path) -> tuple[str, dict[str, Any]]:
    """A thread started on `client`'s server that waits for the approval of its write: its id and the request."""
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[WRITE]), step("done")], "critic": [CRITIC_PASS]}
    context = settings(tmp_path, workspace, roles) | {"policy": {"rules": [{"id": "review-writes", "action": "ask", "tool": "write_file"}]}}
    thread_id = (await client.threads.create())["thread_id"]
    out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context)
    [request] = out["__interrupt__"]
    return thread_id, request


async def test_a_thread_waiting_on_one_worker_is_approved_and_finished_on_the_other(
    workers: tuple[DevServer, DevServer], clients: tuple[LangGraphClient, LangGraphClient], tmp_path: Path, workspace: Path
) -> None:
    (first, second), (first_server, second_server) = clients, workers
    thread_id, request = await _waiting_write(first, tmp_path, workspace)
    assert servers_of(first_server, workspace) == {}

    await second.threads.create(thread_id=thread_id, if_exists="do_nothing")  # adopt it by id
    out = await second.runs.wait(thread_id, GRAPH, command={"resume": {request["id"]: {"decision": "approve"}}})

    assert out["status"]["terminal"] == Terminal.SUCCESS, out.get("ending")
    assert (workspace / "summary.md").read_text() == "Ana publishes the notes."
    assert servers_of(first_server, workspace) == {} and servers_of(second_server, workspace) == {}


async def test_the_other_workers_console_decides_a_waiting_thread_and_that_worker_finishes_it(
    workers: tuple[DevServer, DevServer], clients: tuple[LangGraphClient, LangGraphClient], tmp_path: Path, workspace: Path
) -> None:
    """The second server never held the thread: its console's decision adopts it by id and runs it
    on; the page after the decision shows it sent, not as a form to decide again."""
    (first, second), (_, second_server) = clients, workers
    thread_id, request = await _waiting_write(first, tmp_path, workspace)
    call_id = request["value"]["call_id"]
    async with httpx.AsyncClient(base_url=second_server.url, timeout=60.0) as http:
        inbox = await http.get("/console/inbox")
        [article] = re.findall(rf'<article class="request" data-call="{re.escape(call_id)}" data-run="{thread_id}">.*?</article>', inbox.text, re.S)
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', article))
        decided = await http.post("/console/decide", data={**fields, "action": "approve"}, headers={"Origin": second_server.url})
        assert decided.status_code == 303, decided.text[-1500:]
        shown = (await http.get(decided.headers["location"])).text
        assert f"approve {call_id}: the server continues the run" in shown
        assert f'data-call="{call_id}"' not in shown or "sent to the server" in shown  # not offered as a form again
    [run] = await second.runs.list(thread_id, limit=1)
    await second.runs.join(thread_id, run["run_id"])
    values = (await second.threads.get_state(thread_id))["values"]
    assert values["status"]["terminal"] == Terminal.SUCCESS, values.get("ending")
    assert (workspace / "summary.md").read_text() == "Ana publishes the notes."


async def test_a_thread_one_worker_drives_is_refused_by_the_other(
    workers: tuple[DevServer, DevServer], clients: tuple[LangGraphClient, LangGraphClient], tmp_path: Path, workspace: Path
) -> None:
    (first, second), (first_server, second_server) = clients, workers
    thread_id = (await first.threads.create())["thread_id"]
    run = await first.runs.create(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=settings(tmp_path, workspace, SLOW_RUN, probe=True))
    await until_next(first, thread_id, "execute")

    await second.threads.create(thread_id=thread_id, if_exists="do_nothing")
    out = await second.runs.wait(thread_id, GRAPH, input=None, raise_error=False)

    assert out["__error__"]["error"] == "RunActiveElsewhere", out
    assert servers_of(second_server, workspace) == {}
    assert (await first.runs.get(thread_id, run["run_id"]))["status"] == "running"
    running = servers_of(first_server, workspace)
    await first.runs.cancel(thread_id, run["run_id"], wait=True)
    assert all(wait_gone(pid, timeout_s=15.0) for pid in running), servers_of(first_server, workspace)
