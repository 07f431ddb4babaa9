"""What an MCP server asks of a run while its tool runs, through the real graph: a question for
the human (elicitation), a completion from the run's model (sampling), progress, roots."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from graph.status import Terminal
from graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step
from tools import client_features

ASKING_SERVER = Path(__file__).parents[1] / "tools" / "servers" / "asking_server.py"
CALLS = [
    {"name": "asking__ask", "args": {}},
    {"name": "asking__summarize", "args": {"text": "a long text"}},
    {"name": "asking__steps", "args": {"n": 3}},
    {"name": "asking__roots", "args": {}},
]


def _servers(sampling: bool) -> dict[str, Any]:
    return {"mcpServers": {"asking": {"command": sys.executable, "args": [str(ASKING_SERVER)], "trusted": True,
                                      "protocol": "legacy", "sampling": sampling}}}




async def _run(runner, tmp_path: Path, workspace: Path, *, sampling: bool, unattended: bool, seen: Any = None) -> Any:
    script = tmp_path / "script.json"
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=CALLS), step("done")], "critic": [CRITIC_PASS],
             "sampler": [step("a short summary", tokens=(40, 7))]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace), servers=_servers(sampling),
                           unattended=unattended)
    return await runner.start(Task.model_validate({"goal": "Ask the server's tools"}), settings, observe=seen)


def _results(report) -> dict[str, str]:
    return {message.name: message.content.removeprefix("<tool-output>\n").removesuffix("\n</tool-output>")
            for message in report.values["messages"] if getattr(message, "type", "") == "tool"}


async def test_attended_run_answers_the_question_serves_sampling_and_streams_progress(runner, tmp_path, workspace):
    questions: list[dict[str, Any]] = []

    async def human(question: dict[str, Any]) -> dict[str, Any]:
        questions.append(question)
        if question["problem"] is None:
            return {"action": "accept", "content": {"colour": "blue"}}  # not in the enum: asked again
        return {"action": "accept", "content": {"colour": "green"}}

    events: list[dict[str, Any]] = []

    class Seen:
        def __call__(self, node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
            pass

        def custom(self, event: dict[str, Any]) -> None:
            events.append(event)

    with client_features.attend(human):
        report = await _run(runner, tmp_path, workspace, sampling=True, unattended=False, seen=Seen())
    assert report.status == Terminal.SUCCESS
    results = _results(report)
    assert json.loads(results["asking__ask"]) == {"action": "accept", "content": {"colour": "green", "count": 2}}
    assert len(questions) == 2 and "colour" in questions[1]["problem"]
    assert json.loads(results["asking__summarize"])["text"] == "a short summary"
    assert json.loads(results["asking__roots"]) == [workspace.resolve().as_uri()]
    usage = report.values["usage"]
    assert usage["escalations"] == 1 and usage["calls_by_role"]["sampler"] == 1
    assert [e["progress"] for e in events if e.get("kind") == "tool_progress" and e["tool"] == "asking__steps"] == [1, 2, 3]
    traced = [event["data"] for event in await runner.trace(report.thread_id) if event["kind"] == "mcp_request"]
    assert [(event["kind"], event.get("action")) for event in traced] == [("elicitation", "accept"), ("sampling", None)]
    assert traced[1]["reply"]["content"]["text"] == "a short summary"
    # A 2025 server's request does not say which call of its session it is for: recorded on one
    # call of the run, naming every call it may have been made during.
    recorded = [event for obs in report.values["observations"] for event in obs.get("server_requests", [])]
    assert recorded[0]["content"] == {"colour": "green", "count": 2} and recorded[0]["tool"].startswith("one of asking__ask")


async def test_unattended_run_declines_and_sampling_is_refused_unless_the_server_allows_it(runner, tmp_path, workspace):
    async def human(question: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("an unattended run must not ask")

    with client_features.attend(human):
        report = await _run(runner, tmp_path, workspace, sampling=False, unattended=True)
    results = _results(report)
    assert json.loads(results["asking__ask"]) == {"action": "decline", "content": None}
    assert "MCP error" in results["asking__summarize"] and "sampler" not in report.values["usage"]["calls_by_role"]
    assert report.values["usage"]["escalations"] == 0
