"""The approval flow through the real LangGraph server API: `langgraph dev` on our langgraph.json
(graph `boundloop`, Postgres checkpointer), driven only with the langgraph_sdk client."""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk.client import LangGraphClient
from pydantic import TypeAdapter

from boundloop.graph.calls.elicitation import ElicitationAnswer
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from boundloop.nodes.approve import ApprovalDecision
from tests.checkpoints.test_versions import SHORT
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step, workspace  # noqa: F401  (fixture)
from tests.graph.test_trace_with_step import STEP_EVENTS, UNSAVED_WITH_A_STEP
from tests.server.conftest import DevServer

GRAPH = "boundloop"
DELETE = {"name": "workspace__delete_file", "args": {"path": "notes.md"}}
MOVE = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "old.md"}}
RULES = {DELETE["name"]: "rule:coding_assistant.delete", MOVE["name"]: "rule:coding_assistant.move"}
ASKING_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "asking_server.py"
ROLES = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[DELETE, MOVE]), step("done")], "critic": [CRITIC_PASS]}


@pytest.fixture
def context(tmp_path: Path, workspace: Path) -> dict[str, Any]:
    """The run's context (RunSettings): the scripted model on a script whose actor proposes
    delete_file and move_file at once — both ask for approval under coding_assistant."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": ROLES}))
    return {"model": "scripted", "script": str(script), "workspace_root": str(workspace)}


async def start_waiting(client: LangGraphClient, server: DevServer, context: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Start a run that stops at its two approvals; the thread id and tool name → interrupt id."""
    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context, raise_error=False)
    interrupts = out.get("__interrupt__") if isinstance(out, dict) else None
    assert interrupts, f"the run did not stop for approval: {_brief(out)}\n--- server log ---\n{server.log()}"
    return thread["thread_id"], {item["value"]["name"]: item["id"] for item in interrupts}


async def pending(client: LangGraphClient, thread_id: str) -> dict[str, dict[str, Any]]:
    """The thread's pending interrupts as the server reports them, by id."""
    state = await client.threads.get_state(thread_id)
    return {item["id"]: item for task in state["tasks"] for item in task["interrupts"]}


def _brief(out: Any) -> str:
    if isinstance(out, dict):
        out = {key: out.get(key) for key in ("__error__", "ending", "status") if key in out}
    return json.dumps(out, default=str)[:2000]


async def test_the_assistant_exposes_input_and_context_schemas(client: LangGraphClient) -> None:
    [assistant] = await client.assistants.search(graph_id=GRAPH)
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])

    task = _resolve(schemas["input_schema"], schemas["input_schema"]["properties"]["task"])
    assert "goal" in task["properties"] and "goal" in task["required"]
    context = schemas["context_schema"]["properties"]
    assert {"model", "script", "workspace_root", "unattended"} <= set(context)


async def test_the_assistant_exposes_the_output_schema(client: LangGraphClient, langgraph_dev: DevServer) -> None:
    [assistant] = await client.assistants.search(graph_id=GRAPH)
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    warnings = [line for line in langgraph_dev.lines if "Failed to get output schema" in line]
    assert schemas["output_schema"] is not None, f"the server could not build the output schema: {warnings}"
    assert {"status", "result", "messages"} <= set(schemas["output_schema"]["properties"])


async def test_two_gated_calls_wait_as_two_typed_interrupts_and_resume_one_at_a_time(
    client: LangGraphClient, langgraph_dev: DevServer, context: dict[str, Any], workspace: Path
) -> None:
    thread = await client.threads.create()
    thread_id = thread["thread_id"]
    out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context, raise_error=False)
    interrupts = out.get("__interrupt__") or []
    assert len(interrupts) == 2, f"{_brief(out)}\n--- server log ---\n{langgraph_dev.log()}"
    decision_schema = TypeAdapter(ApprovalDecision).json_schema()
    for item in interrupts:
        value = item["value"]
        assert value["type"] == "tool_approval"
        assert value["rule"] == RULES[value["name"]]
        assert value["args"] == {DELETE["name"]: DELETE, MOVE["name"]: MOVE}[value["name"]]["args"]
        assert item["response_schema"] == decision_schema  # the typed form survives the server
    by_tool = {item["value"]["name"]: item["id"] for item in interrupts}
    assert set(by_tool) == set(RULES)
    assert (await client.threads.get(thread_id))["status"] == "interrupted"
    waiting = await pending(client, thread_id)
    assert set(waiting) == set(by_tool.values())
    assert all(item["response_schema"] == decision_schema for item in waiting.values())
    assert (workspace / "notes.md").exists() and not (workspace / "old.md").exists()  # nothing ran yet

    move_approved = {"resume": {by_tool[MOVE["name"]]: {"decision": "approve", "approver": "ana"}}}
    out = await client.runs.wait(thread_id, GRAPH, command=move_approved, raise_error=False)
    assert [item["id"] for item in out.get("__interrupt__") or []] == [by_tool[DELETE["name"]]], _brief(out)
    assert set(await pending(client, thread_id)) == {by_tool[DELETE["name"]]}
    assert (await client.threads.get(thread_id))["status"] == "interrupted"
    assert (workspace / "notes.md").exists() and not (workspace / "old.md").exists()  # approved: runs after the delete before it is decided

    delete_rejected = {"resume": {by_tool[DELETE["name"]]: {"decision": "reject", "message": "keep it"}}}
    out = await client.runs.wait(thread_id, GRAPH, command=delete_rejected, raise_error=False)
    assert "__interrupt__" not in out and "__error__" not in out, _brief(out)
    values = (await client.threads.get_state(thread_id))["values"]
    assert values["status"]["terminal"] == Terminal.SUCCESS, values.get("ending")
    [rejected] = [m for m in values["messages"] if m["type"] == "tool" and m["name"] == DELETE["name"]]
    assert rejected["content"] == "rejected: a human declined workspace__delete_file: keep it"
    assert (workspace / "old.md").exists()
    assert await pending(client, thread_id) == {}
    assert (await client.threads.get(thread_id))["status"] == "idle"
    await _assert_trace_saved_with_its_steps(langgraph_dev, thread_id)


async def _assert_trace_saved_with_its_steps(server: DevServer, thread_id: str) -> None:
    """The server's saver (langgraph.json's checkpointer, behind the server's adapter) writes each
    step's events in the transaction that saves the step, once each."""
    async with await psycopg.AsyncConnection.connect(server.database_url, autocommit=True) as conn:
        events = await (await conn.execute("SELECT kind, node, data ->> 'step', data -> 'call' ->> 'call_id' FROM boundloop_trace"
                                           " WHERE thread_id = %s AND kind = ANY(%s) ORDER BY id", (thread_id, list(STEP_EVENTS)))).fetchall()
        # node and call events only: a task that asks again upserts its interrupt write, so the first ask's row is gone
        unsaved = await (await conn.execute(UNSAVED_WITH_A_STEP, {"t": thread_id, "kinds": ["node", "call"]})).fetchall()
    nodes = [event for event in events if event[0] != "interrupt"]
    assert nodes[0][1] == "intake" and nodes[-1][1] == "finalize", events
    assert len(nodes) == len(set(nodes)), f"a step's event was written twice: {events}"
    assert sum(1 for event in events if event[0] == "interrupt") >= 2 and sum(1 for event in nodes if event[1] == "approve") == 2
    assert unsaved == [], f"events not saved with their step: {unsaved}"


async def test_a_thread_the_cli_started_is_finished_by_the_server(
    client: LangGraphClient, langgraph_dev: DevServer, context: dict[str, Any], workspace: Path
) -> None:
    """Started by the CLI's runner, adopted by the server by id and finished there (graph/README.md, "What
    survives where"). The server's graphs take their versions from our saver (checkpoints/server.py):
    with the adapter's own 32-digit ones, the server's would compare smaller than the CLI's."""
    thread_id = str(uuid.uuid4())  # the server takes only UUIDs
    async with Runner(langgraph_dev.database_url) as runner:
        started = await runner.start(Task(goal="Summarize notes.md"), RunSettings(**context), thread_id=thread_id)
    by_tool = {item["value"]["name"]: item["id"] for item in started.interrupts}
    by_the_cli = await _checkpoints(langgraph_dev, thread_id)

    await client.threads.create(thread_id=thread_id, if_exists="do_nothing")
    decisions = {by_tool[MOVE["name"]]: {"decision": "approve", "approver": "ana"}, by_tool[DELETE["name"]]: {"decision": "reject"}}
    out = await client.runs.wait(thread_id, GRAPH, command={"resume": decisions}, raise_error=False)

    assert out.get("status", {}).get("terminal") == Terminal.SUCCESS, _brief(out)
    assert (workspace / "old.md").exists()  # the move ran, the delete did not
    by_the_server = [checkpoint for checkpoint in await _checkpoints(langgraph_dev, thread_id) if checkpoint not in by_the_cli]
    versions = [version for checkpoint in by_the_server for version in checkpoint["channel_versions"].values()]
    assert versions and all(SHORT.fullmatch(version) for version in versions), sorted(set(versions))[-3:]


async def _checkpoints(server: DevServer, thread_id: str) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(server.database_url, autocommit=True) as conn:
        rows = await (await conn.execute("SELECT checkpoint FROM checkpoints WHERE thread_id = %s", (thread_id,))).fetchall()
    return [checkpoint for (checkpoint,) in rows]


async def test_a_resume_that_does_not_match_the_response_schema_is_refused(
    client: LangGraphClient, langgraph_dev: DevServer, context: dict[str, Any], workspace: Path
) -> None:
    thread_id, by_tool = await start_waiting(client, langgraph_dev, context)
    move = by_tool[MOVE["name"]]

    out = await client.runs.wait(thread_id, GRAPH, command={"resume": {move: {"decision": "maybe"}}}, raise_error=False)
    error = out.get("__error__")
    assert error and error["error"] == "ValidationError", _brief(out)
    assert "decision" in error["message"] and "maybe" in error["message"]
    assert (await client.threads.get(thread_id))["status"] == "error"
    assert set(await pending(client, thread_id)) == set(by_tool.values())  # both still wait
    assert (workspace / "notes.md").exists() and not (workspace / "old.md").exists()  # nothing ran

    out = await client.runs.wait(thread_id, GRAPH, command={"resume": {move: {"decision": "approve"}}}, raise_error=False)
    assert [item["id"] for item in out.get("__interrupt__") or []] == [by_tool[DELETE["name"]]], _brief(out)
    out = await client.runs.wait(thread_id, GRAPH, command={"resume": {by_tool[DELETE["name"]]: {"decision": "reject"}}}, raise_error=False)
    assert "__interrupt__" not in out and "__error__" not in out, _brief(out)
    assert (workspace / "old.md").exists()  # a valid answer to the same interrupt still goes through


async def start_asking(client: LangGraphClient, server: DevServer, tmp_path: Path, workspace: Path) -> tuple[str, dict[str, Any]]:
    """Start a run whose one call (asking__ask) stops at the server's question; the thread id and the interrupt."""
    script = tmp_path / "asking.json"
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[{"name": "asking__ask", "args": {}}]), step("done")], "critic": [CRITIC_PASS]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    servers = {"mcpServers": {"asking": {"command": sys.executable, "args": [str(ASKING_SERVER)], "trusted": True, "protocol": "legacy"}}}
    context = {"model": "scripted", "script": str(script), "workspace_root": str(workspace), "servers": servers}
    thread_id = (await client.threads.create())["thread_id"]
    out = await client.runs.wait(thread_id, GRAPH, input={"task": {"goal": "Ask the server"}}, context=context, raise_error=False)
    [item] = out.get("__interrupt__") or [None]
    assert item is not None, f"{_brief(out)}\n--- server log ---\n{server.log()}"
    assert item["value"]["type"] == "elicitation" and item["value"]["message"] == "Which colour, and how many?"
    return thread_id, item


async def answered_with(client: LangGraphClient, thread_id: str) -> tuple[dict[str, Any], str]:
    """The thread's values once it ended, and what the asking tool returned."""
    values = (await client.threads.get_state(thread_id))["values"]
    assert values["status"]["terminal"] == Terminal.SUCCESS, values.get("ending")
    [asked] = [m for m in values["messages"] if m["type"] == "tool" and m["name"] == "asking__ask"]
    return values, asked["content"]


async def test_a_servers_question_waits_as_a_typed_interrupt_and_is_answered_through_the_api(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    thread_id, item = await start_asking(client, langgraph_dev, tmp_path, workspace)
    assert item["response_schema"] == TypeAdapter(ElicitationAnswer).json_schema()

    answer = {"resume": {item["id"]: {"action": "accept", "content": {"colour": "red"}, "approver": "ana"}}}
    out = await client.runs.wait(thread_id, GRAPH, command=answer, raise_error=False)
    assert "__interrupt__" not in out and "__error__" not in out, _brief(out)
    values, content = await answered_with(client, thread_id)
    assert '{"action": "accept", "content": {"colour": "red", "count": 2}}' in content
    assert values["usage"]["escalations"] == 1


async def test_the_console_route_answers_a_servers_question_on_a_server_thread(
    client: LangGraphClient, langgraph_dev: DevServer, tmp_path: Path, workspace: Path
) -> None:
    """`/console` on the server: the answer form resumes the thread through the server's API."""
    thread_id, item = await start_asking(client, langgraph_dev, tmp_path, workspace)
    call_id = item["value"]["call_id"]
    async with httpx.AsyncClient(base_url=langgraph_dev.url, timeout=60.0) as http:
        inbox = await http.get("/console/inbox")
        [article] = re.findall(rf'<article class="request" data-call="{re.escape(call_id)}" data-run="{thread_id}">.*?</article>', inbox.text, re.S)
        assert "Which colour, and how many?" in article and "driven by a LangGraph server" in article
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', article))
        decided = await http.post("/console/decide", data={**fields, "action": "answer", "answer": '{"colour": "green"}'},
                                  headers={"Origin": langgraph_dev.url})
        assert decided.status_code == 303, decided.text[:1000]
        shown = (await http.get(decided.headers["location"])).text
        assert f"approve {call_id}: the server continues the run" in shown, re.findall(r'<p class="(?:notice|error)[^>]*>.*?</p>', shown, re.S)
        assert f'data-call="{call_id}"' not in shown or "sent to the server" in shown  # never offered as a form again while the server takes it

    [run] = await client.runs.list(thread_id, limit=1)
    await client.runs.join(thread_id, run["run_id"])
    _, content = await answered_with(client, thread_id)
    assert '{"action": "accept", "content": {"colour": "green", "count": 2}}' in content


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (pydantic puts nested models under `$defs`)."""
    while "$ref" in node:
        node = root["$defs"][node["$ref"].rpartition("/")[2]]
    return node


async def test_the_server_keeps_promoted_memory_in_its_own_store(client: LangGraphClient, tmp_path: Path, workspace: Path) -> None:
    """On the server path the write gate writes to the store LangGraph gives the graph (the
    server's, readable through its /store API), not to a store of its own."""
    from tests.graph.conftest import JUDGE_PASS, READ_NOTES

    memory = '<memory-candidates>[{"text": "Ana: publish the notes", "sources": ["a0.0"]}]</memory-candidates>'
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("Ana publishes them.\n" + memory)],
             "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}
    script = tmp_path / "memory.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    context = {"model": "scripted", "script": str(script), "workspace_root": str(workspace), "user": "server-user"}
    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], GRAPH, input={"task": {"goal": "Summarize notes.md"}}, context=context, raise_error=False)
    assert out["status"]["terminal"] == Terminal.SUCCESS, _brief(out)
    found = await client.store.search_items(["boundloop", "memory", "server-user", "coding_assistant"])
    assert [item["value"]["text"] for item in found["items"]] == ["Ana: publish the notes"]
