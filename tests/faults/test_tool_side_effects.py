"""A side-effecting MCP server killed in the middle of a call, before or after its effect.

Real parts: the pager server over stdio (its page file is the side effect a test counts), the
graph, the ledger in Postgres. A call that was sent and never answered must not be recorded as
failed (ABORT): with an idempotency key it is re-sent with the same key once the server is back
(one page, COMPLETE); without one it goes to human review (INTENT kept, the rollback lists it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from boundloop.checkpoints import store
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, step

PAGER = Path(__file__).parents[1] / "tools" / "servers" / "pager_server.py"
POLICY = {"rules": [{"id": "faults.pager", "action": "allow", "server": "pager", "tool": "*", "reason": "The fault tests page without a human."}]}


def _pages(tmp_path: Path) -> list[dict[str, str]]:
    path = tmp_path / "pages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def _run_page(runner: Runner, tmp_path: Path, *, tool: str, die_once: str, thread: str) -> Any:
    """Page ana once through `tool` while the server dies once, `die_once` ('before'|'after') the page is written."""
    args = ["--pages", str(tmp_path / "pages.jsonl"), "--die-once", die_once, "--marker", str(tmp_path / "died")]
    servers = {"mcpServers": {"pager": {"command": sys.executable, "args": [str(PAGER), *args], "trusted": True}}}
    plan = {"content": {"steps": [{"id": "page", "description": "Page the on-call", "tools": [f"pager__{tool}"]}], "blocked": None},
            "usage": {"input_tokens": 100, "output_tokens": 20}}
    call = {"name": f"pager__{tool}", "args": {"oncall": "ana", "message": "db-2 disk full"}}
    roles = {"planner": [plan], "actor": [step(calls=[call]), step("ana was paged")], "critic": [CRITIC_PASS]}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-faults", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), servers=servers, policy=POLICY, workspace_root=str(tmp_path))
    return await runner.start(Task(goal="Page the on-call about db-2"), settings, thread_id=thread)


async def _ledger(runner: Runner, thread: str) -> list[tuple[str, str, str]]:
    return [(entry.call_id, entry.tool, entry.status) for entry in await store.run_ledger(runner.pool, thread)]


async def _call_status(report: Any) -> str:
    return next(obs["status"] for obs in report.values["observations"] if obs["call_id"] == "a0.0" and "status" in obs)


async def test_a_keyed_page_cut_off_after_its_effect_is_resent_with_its_key_and_pages_once(runner, tmp_path):
    report = await _run_page(runner, tmp_path, tool="page", die_once="after", thread="keyed-after")
    assert report.status == Terminal.SUCCESS
    assert await _call_status(report) == "ok"
    assert len(_pages(tmp_path)) == 1 and _pages(tmp_path)[0]["key"].startswith("bl-")
    assert await _ledger(runner, "keyed-after") == [("a0.0", "page", "COMPLETE")]
    assert (await store.get_run(runner.pool, "keyed-after")).status == Terminal.SUCCESS
    again = await runner.resume("keyed-after")
    assert again.status == Terminal.SUCCESS and len(_pages(tmp_path)) == 1


async def test_a_keyed_page_cut_off_before_its_effect_is_resent_and_pages_once(runner, tmp_path):
    report = await _run_page(runner, tmp_path, tool="page", die_once="before", thread="keyed-before")
    assert report.status == Terminal.SUCCESS
    assert await _call_status(report) == "ok"
    assert len(_pages(tmp_path)) == 1
    assert await _ledger(runner, "keyed-before") == [("a0.0", "page", "COMPLETE")]
    assert (await store.get_run(runner.pool, "keyed-before")).status == Terminal.SUCCESS


async def test_an_unkeyed_page_cut_off_after_its_effect_goes_to_review_and_is_never_sent_again(runner, tmp_path):
    report = await _run_page(runner, tmp_path, tool="page_unkeyed", die_once="after", thread="unkeyed")
    assert report.status == Terminal.REVIEW_REQUIRED and report.waiting
    assert await _call_status(report) == "unknown_after_crash"
    told = next(message for message in report.values["messages"] if getattr(message, "tool_call_id", None))
    assert "may or may not have taken effect" in told.content and "cannot run" not in told.content
    assert await _ledger(runner, "unkeyed") == [("a0.0", "page_unkeyed", "INTENT")]
    assert len(_pages(tmp_path)) == 1
    row = await store.get_run(runner.pool, "unkeyed")
    assert row.status == "waiting" and row.detail.startswith("REVIEW_REQUIRED")

    resumed = await runner.resume("unkeyed")  # nothing decided: it still waits, and pages nobody
    assert resumed.status == Terminal.REVIEW_REQUIRED and len(_pages(tmp_path)) == 1
    review = resumed.interrupts[0]["value"]["call_id"]
    ended = await runner.decide("unkeyed", review, {"decision": "reject", "message": "paged, but unverified"})
    assert not ended.waiting
    manual = [(item["call_id"], item["tool"], item["status"]) for item in ended.result["compensations"]]
    assert manual == [("a0.0", "pager__page_unkeyed", "manual_action_required")]
    assert len(_pages(tmp_path)) == 1
    assert (await store.get_run(runner.pool, "unkeyed")).status == ended.status
