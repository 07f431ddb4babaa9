"""Serving the loop under `langgraph dev`, driven only with langgraph_sdk: every stream mode, the
custom progress stream, typed forms, tool servers that live only while a run drives, cancel
(interrupt and rollback), resumes without settings, one driver per thread, parallel runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk.client import LangGraphClient

from boundloop.graph.core.budget import Budget
from boundloop.graph.core.profiles import budget_for
from boundloop.graph.services import default_servers
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, phases_asked, step, workspace  # noqa: F401  (fixture)
from tests.server.conftest import DevServer
from tests.tools._procs import wait_gone

REPO = Path(__file__).resolve().parents[2]
GRAPH = "boundloop"
PROBE = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"
READS = 7
"""Actor turns that each read another file: 4 graph steps apiece, so a run takes more than 25 steps."""
LONG_RUN = {
    "planner": [PLAN_ONE_STEP],
    "actor": [step(calls=[{"name": "workspace__read_file", "args": {"path": f"notes-{n}.md"}}]) for n in range(READS)] + [step("done")],
    "critic": [CRITIC_PASS],
}


def slow_run(seconds: float) -> dict[str, Any]:
    """A run whose one tool call takes `seconds`."""
    return {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[{"name": "probe__slow", "args": {"seconds": seconds}}]), step("done")], "critic": [CRITIC_PASS]}


SLOW_RUN = slow_run(120.0)
LOCK_HELD = "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid::bigint = (hashtextextended('boundloop-run:' || %s, 0) & 4294967295)"


def settings(tmp_path: Path, workspace: Path, roles: dict[str, Any], *, probe: bool = False) -> dict[str, Any]:
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    for n in range(READS):
        (workspace / f"notes-{n}.md").write_text(f"note {n}\n")
    context: dict[str, Any] = {"model": "scripted", "script": str(script), "workspace_root": str(workspace), **phases_asked(roles)}
    if probe:
        servers = default_servers(str(workspace))
        servers["mcpServers"]["probe"] = {"command": sys.executable, "args": [str(PROBE)], "cwd": str(workspace), "trusted": True}
        context["servers"] = servers
    return context


def servers_of(server: DevServer, workspace: Path) -> dict[int, str]:
    """The MCP servers still running for the run on `workspace` (named in its workspace server's
    arguments, and the probe server's working directory)."""
    return {pid: cmd for pid, cmd in server.mcp_servers().items() if str(workspace) in cmd or _cwd(pid) == str(workspace)}


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


async def until_next(client: LangGraphClient, thread_id: str, node: str) -> None:
    """Wait until the thread's latest checkpoint has `node` pending (the run is about to run it)."""
    for _ in range(1200):
        if node in (await client.threads.get_state(thread_id))["next"]:
            await asyncio.sleep(0.5)  # into the node
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"the run on {thread_id} never reached {node}")


async def test_every_stream_mode_runs_a_long_run_to_success(client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path) -> None:
    """More than 25 graph steps: `events` runs to the end, not to langchain-core's default recursion limit."""
    modes = ["values", "updates", "messages-tuple", "custom", "debug", "tasks", "checkpoints"]
    for stream_mode in (["events"], modes):
        thread = await client.threads.create()
        seen: dict[str, int] = {}
        async for part in client.runs.stream(thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}},
                                              context=settings(tmp_path, workspace, LONG_RUN), stream_mode=stream_mode):
            assert part.event != "error", f"{stream_mode}: {part.data}\n{langgraph_dev.log()}"
            seen[part.event.split("|")[0]] = seen.get(part.event.split("|")[0], 0) + 1
        state = await client.threads.get_state(thread["thread_id"])
        assert state["values"]["status"]["terminal"] == Terminal.SUCCESS, state["values"].get("ending")
        assert (await client.threads.get(thread["thread_id"]))["status"] == "idle"
        assert state["values"]["usage"]["tool_calls"] == READS
        expected = {"messages" if mode == "messages-tuple" else mode for mode in stream_mode}
        assert expected <= set(seen), f"{stream_mode}: only {seen}"


async def test_the_custom_stream_carries_each_phase_with_budget_and_tool_outcomes(client: LangGraphClient, tmp_path: Path, workspace: Path) -> None:
    thread = await client.threads.create()
    records = [part.data async for part in client.runs.stream(
        thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}},
        context=settings(tmp_path, workspace, LONG_RUN), stream_mode="custom") if part.event == "custom"]

    phases = [record["phase"] for record in records]
    assert phases[:3] == ["intake", "plan", "validate_plan"] and phases[-1] == "finalize"
    assert phases.count("act") == READS + 1  # each turn after the first grounds the previous turn's read
    limits = budget_for("coding_assistant", {}).model_dump()
    assert set(records[-1]["budget"]) == set(limits) - {"parallel_calls"}
    assert records[-1]["budget"]["tool_calls"] == {"used": READS, "limit": limits["tool_calls"]}
    assert records[-1]["budget"]["model_turns"]["used"] == READS + 3  # planner, actor × (READS + 1), critic
    acts = [record["tools"] for record in records if record["phase"] == "act"]
    assert acts[0] == [] and acts[1:] == [[{"tool": "workspace__read_file", "status": "verified"}]] * READS  # decided calls are pending


async def test_every_input_context_and_output_field_is_typed_and_described(client: LangGraphClient) -> None:
    [assistant] = await client.assistants.search(graph_id=GRAPH)
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    inputs = schemas["input_schema"]
    forms = {
        "input": inputs["properties"],
        "task": inputs["$defs"]["Task"]["properties"],
        "check": inputs["$defs"]["Check"]["properties"],
        "context": schemas["context_schema"]["properties"],
        "output": schemas["output_schema"]["properties"],
    }
    untyped = [f"{form}.{name}" for form, fields in forms.items() for name, field in fields.items()
               if not (field.get("type") or field.get("$ref") or field.get("anyOf") or field.get("oneOf"))]
    undescribed = [f"{form}.{name}" for form, fields in forms.items() for name, field in fields.items() if not field.get("description")]
    assert untyped == [] and undescribed == []

    budget = forms["task"]["budget"]
    assert set(budget["properties"]) == set(Budget.model_fields) and budget["additionalProperties"] is False
    assert all(dimension.get("description") for dimension in budget["properties"].values())
    servers = forms["context"]["servers"]["anyOf"][0]
    assert {"command", "args", "url", "trusted", "timeout_s"} <= set(servers["properties"]["mcpServers"]["additionalProperties"]["properties"])
    policy = forms["context"]["policy"]["anyOf"][0]
    assert {"id", "action", "tool"} <= set(policy["properties"]["rules"]["items"]["properties"])


async def test_tool_servers_stop_when_a_run_waits_for_approval_and_restart_on_resume(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    write = {"name": "workspace__write_file", "args": {"path": "summary.md", "content": "Ana publishes the notes."}}
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step(calls=[write]), step("done")], "critic": [CRITIC_PASS]}
    context = settings(tmp_path, workspace, roles) | {"policy": {"rules": [{"id": "review-writes", "action": "ask", "tool": "write_file"}]}}
    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context)
    [request] = out["__interrupt__"]
    assert servers_of(langgraph_dev, workspace) == {}, "a run waiting for approval keeps its tool servers"

    out = await client.runs.wait(thread["thread_id"], GRAPH, command={"resume": {request["id"]: {"decision": "approve"}}})
    assert out["status"]["terminal"] == Terminal.SUCCESS, out.get("ending")
    assert (workspace / "summary.md").read_text() == "Ana publishes the notes."  # the resumed run started its server again
    assert servers_of(langgraph_dev, workspace) == {}


async def test_tool_servers_stop_when_a_run_fails(client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path) -> None:
    """The script runs out of actor steps after one read: the run errors (ScriptExhausted)."""
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES])], "critic": [CRITIC_PASS]}
    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}},
                                 context=settings(tmp_path, workspace, roles), raise_error=False)
    assert out["__error__"]["error"] == "ScriptExhausted", out
    assert servers_of(langgraph_dev, workspace) == {}


async def test_cancel_with_interrupt_halts_user_cancel_resumably_and_reaps_the_servers(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    context = settings(tmp_path, workspace, SLOW_RUN, probe=True)
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context)
    await until_next(client, thread_id, "execute")
    running = servers_of(langgraph_dev, workspace)
    assert len(running) == 2, running  # workspace and probe

    await client.runs.cancel(thread_id, run["run_id"], wait=True, action="interrupt")

    assert all(wait_gone(pid, timeout_s=15.0) for pid in running), servers_of(langgraph_dev, workspace)
    state = await client.threads.get_state(thread_id)
    assert state["values"]["status"]["terminal"] == Terminal.USER_CANCEL
    halt = state["values"]["result"]
    assert (halt["kind"], halt["code"]) == ("halt", "USER_CANCEL") and "resume" in halt["next_safe_action"].lower()
    assert state["next"] == ["execute"]  # the cancelled step is still pending
    with psycopg.connect(langgraph_dev.database_url) as db:
        assert db.execute("SELECT status FROM boundloop_runs WHERE thread_id = %s", (thread_id,)).fetchone() == (Terminal.USER_CANCEL,)
        assert db.execute(LOCK_HELD, (thread_id,)).fetchone() == (0,)  # the lease went with the run


async def test_a_halted_run_resumes_to_success(client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path) -> None:
    """The cancelled call runs again on resume (4 s), in new tool servers, and the run commits."""
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=settings(tmp_path, workspace, slow_run(4.0), probe=True))
    await until_next(client, thread_id, "execute")
    await client.runs.cancel(thread_id, run["run_id"], wait=True, action="interrupt")
    assert (await client.threads.get_state(thread_id))["values"]["status"]["terminal"] == Terminal.USER_CANCEL

    out = await client.runs.wait(thread_id, GRAPH, input=None)  # the settings come from the checkpoint
    assert out["status"]["terminal"] == Terminal.SUCCESS, out.get("ending")
    [slept] = [m for m in out["messages"] if m["type"] == "tool"]
    assert "slept 4.0" in str(slept["content"])
    assert servers_of(langgraph_dev, workspace) == {}


async def test_cancel_with_rollback_forgets_the_run(client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=settings(tmp_path, workspace, SLOW_RUN, probe=True))
    await until_next(client, thread_id, "execute")

    await client.runs.cancel(thread_id, run["run_id"], wait=True, action="rollback")

    for _ in range(100):  # the server deletes the run's checkpoints after the cancel returns
        if (await client.threads.get_state(thread_id))["values"] == {}:
            break
        await asyncio.sleep(0.1)
    assert (await client.threads.get_state(thread_id))["values"] == {}
    with psycopg.connect(langgraph_dev.database_url) as db:
        left = db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)).fetchone()
    assert left == (0,)
    assert not [line for line in langgraph_dev.lines if "missing adelete_for_runs" in line]
    assert servers_of(langgraph_dev, workspace) == {}


async def test_a_run_without_settings_is_refused_with_the_fix_and_resumes_with_them(
    client: LangGraphClient, tmp_path: Path, workspace: Path
) -> None:
    """No settings in the input, none as context: intake refuses before anything runs, and the
    thread stays at intake until a run brings them."""
    thread_id = (await client.threads.create())["thread_id"]

    out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, raise_error=False)

    assert out["__error__"]["error"] == "SettingsMissing", out
    assert out["__error__"]["message"].startswith(f"run {thread_id} has no settings")
    assert "context=RunSettings" in out["__error__"]["message"]
    assert (await client.threads.get_state(thread_id))["next"] == ["intake"]
    out = await client.runs.wait(thread_id, GRAPH, input=None, context=settings(tmp_path, workspace, LONG_RUN))
    assert out["status"]["terminal"] == Terminal.SUCCESS


async def test_a_thread_driven_elsewhere_is_not_driven_by_the_server(client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path) -> None:
    """Another driver (a CLI resume, another server) holds the run's lease: the server's run fails
    at once with the reason, and runs nothing."""
    thread_id = (await client.threads.create())["thread_id"]
    with psycopg.connect(langgraph_dev.database_url, autocommit=True) as other_driver:
        other_driver.execute("SELECT pg_advisory_lock(hashtextextended('boundloop-run:' || %s, 0))", (thread_id,))
        out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}},
                                     context=settings(tmp_path, workspace, LONG_RUN), raise_error=False)
    assert out["__error__"]["error"] == "RunActiveElsewhere", out
    assert "is active elsewhere" in out["__error__"]["message"]
    assert (await client.threads.get_state(thread_id))["values"] == {}  # nothing ran
    assert servers_of(langgraph_dev, workspace) == {}


async def test_runs_on_one_thread_take_turns_and_runs_on_two_threads_run_at_once(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    """The README command serves runs in parallel (`langgraph dev` alone runs one at a time), and
    the server never drives one thread twice: a second run on the thread waits (enqueue)."""
    slow_thread = (await client.threads.create())["thread_id"]
    slow = await client.runs.create(slow_thread, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=settings(tmp_path, workspace, SLOW_RUN, probe=True))
    await until_next(client, slow_thread, "execute")
    queued = await client.runs.create(slow_thread, GRAPH, input=None, multitask_strategy="enqueue")

    other = await client.threads.create()
    out = await client.runs.wait(other["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=settings(tmp_path, workspace, LONG_RUN))

    assert out["status"]["terminal"] == Terminal.SUCCESS
    assert (await client.runs.get(slow_thread, slow["run_id"]))["status"] == "running"
    assert (await client.runs.get(slow_thread, queued["run_id"]))["status"] == "pending"
    with psycopg.connect(langgraph_dev.database_url) as db:
        assert db.execute(LOCK_HELD, (slow_thread,)).fetchone() == (1,)
    await client.runs.cancel(slow_thread, queued["run_id"], wait=True)
    await client.runs.cancel(slow_thread, slow["run_id"], wait=True)


def test_the_readme_recipe_gets_a_run_approved_through_the_server_api(langgraph_dev: DevServer, tmp_path: Path) -> None:
    """The README's client block, as written but for the server's port, from a new directory."""
    readme = (REPO / "README.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "get_client" in b]
    script = block.replace("http://127.0.0.1:2124", langgraph_dev.url)
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}\n--- server ---\n{langgraph_dev.log()}"
    lines = done.stdout.splitlines()
    assert lines[:2] == ["approving workspace__write_file summary.md"] * 2, done.stdout
    assert lines[2].startswith("SUCCESS summary.md lists all three action items"), done.stdout
    assert "Chloe" in (tmp_path / "demo-workspace" / "summary.md").read_text()


async def test_the_console_route_decides_a_server_thread_through_the_server_api(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    """`/console` (langgraph.json `http.app`) lists the server's waiting thread, and its approval
    continues the thread as a run of the server, which deletes the file."""
    import httpx

    script = tmp_path / "script.json"
    delete = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[delete]), step("done")],
                                                                            "critic": [CRITIC_PASS]}}))
    thread_id = (await client.threads.create())["thread_id"]
    context = {"model": "scripted", "script": str(script), "workspace_root": str(workspace)}
    out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context)
    assert out.get("__interrupt__"), out

    async with httpx.AsyncClient(base_url=langgraph_dev.url, timeout=60.0) as http:
        listed = await http.get("/console/")
        [row] = re.findall(rf'<tr data-run="{thread_id}">.*?</tr>', listed.text, re.S)
        assert 'class="status waiting"' in row and "CONFIRM_REQUIRED: tool_approval a0.0 workspace__delete_file" in row, row
        inbox = await http.get("/console/inbox")
        assert inbox.status_code == 200, inbox.text[:500]
        [article] = re.findall(rf'<article class="request" data-call="a0.0" data-run="{thread_id}">.*?</article>', inbox.text, re.S)
        assert "driven by a LangGraph server" in article
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', article))
        decided = await http.post("/console/decide", data={**fields, "action": "approve"}, headers={"Origin": langgraph_dev.url})
        assert decided.status_code == 303, decided.text[:1000]
        shown = await http.get(decided.headers["location"])
    assert "approve a0.0: the server continues the run" in shown.text

    [run] = await client.runs.list(thread_id, limit=1)
    await client.runs.join(thread_id, run["run_id"])
    state = await client.threads.get_state(thread_id)
    assert state["values"]["status"]["terminal"] == Terminal.SUCCESS
    assert not (workspace / "notes.md").exists()
