"""Many runs at once in one process, each re-planning one failed step (the eval scenario
fault-step-replanned): every run ends as it would alone, with only its own calls, plan, files and
ledger entries, and the shared connection pool serves them all without a failed request."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage

from boundloop.checkpoints import store
from boundloop.graph.evals.suite import load_suite
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings

SUITE = Path(__file__).parents[2] / "graph" / "evals" / "default.json"
RUNS = 20


async def test_twenty_runs_each_replanning_a_step_at_once_end_alone(runner, tmp_path):
    [scenario] = [item for item in load_suite(SUITE).scenarios if item.name == "fault-step-replanned"]
    script = tmp_path / "script.json"
    script.write_text(scenario.script.model_dump_json())
    workspaces = []
    for n in range(RUNS):
        workspace = tmp_path / f"w{n}"
        for name, text in scenario.workspace.items():
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            (workspace / name).write_text(text)
        workspaces.append(workspace)

    def settings(workspace: Path) -> RunSettings:
        return RunSettings(**scenario.settings, model="scripted", script=str(script), workspace_root=str(workspace))

    reports = await asyncio.gather(*(runner.start(scenario.task, settings(workspace), thread_id=f"replan-{n}")
                                     for n, workspace in enumerate(workspaces)))

    keys: list[str] = []
    for n, (report, workspace) in enumerate(zip(reports, workspaces)):
        assert report.status == Terminal.SUCCESS, (n, report.values.get("ending"))
        assert report.values["usage"]["replans"] == 1
        steps = {step["id"]: step["status"] for step in report.values["plan"]["steps"]}
        assert steps.get("s1") == "done" and steps.get("s2b") == "done" and "s2" not in steps, steps
        assert (workspace / "a.md").read_text() == "A\n" and (workspace / "c.md").read_text() == "C\n"
        assert sorted(path.name for path in workspace.iterdir()) == ["a.md", "b.md", "c.md"]
        messages = report.values["messages"]
        calls = [call["id"] for message in messages if isinstance(message, AIMessage) for call in message.tool_calls]
        assert Counter(message.tool_call_id for message in messages if isinstance(message, ToolMessage)) == Counter(calls)
        observations = report.values["observations"]
        assert len(observations) == len(calls) == 4  # a.md, b.md twice, c.md: this run's calls, no other's
        assert {obs["tool_call_id"] for obs in observations} == set(calls)
        ledger = await store.run_ledger(runner.pool, report.thread_id)
        assert {entry.thread_id for entry in ledger} == {report.thread_id}
        done = Counter(entry.step_id for entry in ledger if entry.status == "COMPLETE")
        assert done == Counter({"s1": 1, "s2b": 1}), ledger  # a.md once, c.md once; the failed b.md writes completed nothing
        keys += [entry.idempotency_key for entry in ledger]
    assert len(keys) == len(set(keys)), "a ledger entry shared by two runs"
    stats = runner.pool.get_stats()
    assert stats.get("requests_errors", 0) == 0 and stats.get("connections_errors", 0) == 0, stats
