"""Approval decisions are bound to the exact call, used once, expire, and survive processes."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from boundloop.checkpoints import approvals
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, step
from tests.graph.test_cli import BOUNDLOOP, _env

MOVE_A = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "a.md"}}
MOVE_B = {"name": "workspace__move_file", "args": {"source": "b.md", "destination": "c.md"}}
SCRIPT = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[MOVE_A]), step("done")], "critic": [CRITIC_PASS]}


async def test_a_decision_for_other_arguments_is_refused_and_the_call_stays_pending(run_script, runner):
    waiting = await run_script(SCRIPT)
    call_id = waiting.interrupts[0]["value"]["call_id"]
    with pytest.raises(ApprovalRefused, match="argument hash mismatch"):
        await runner.decide(waiting.thread_id, call_id, {"decision": "approve", "args_hash": "0" * 64})
    assert (await runner.report(waiting.thread_id)).status == Terminal.CONFIRM_REQUIRED


async def test_a_tampered_decision_sent_straight_to_the_graph_is_refused_and_asked_again(run_script, runner, workspace):
    """A client that bypasses the runner gets the refusal in a new interrupt; nothing runs."""
    waiting = await run_script(SCRIPT)
    [item] = waiting.interrupts
    again = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "approve", "args_hash": "f" * 64}})
    [asked] = again.interrupts
    assert asked["value"]["refused"].endswith("(argument hash mismatch)")
    assert (workspace / "notes.md").exists()
    done = await runner.resume(waiting.thread_id, decisions={asked["id"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS and (workspace / "a.md").exists()


async def test_a_replayed_decision_and_one_for_an_unknown_call_are_refused(run_script, runner):
    waiting = await run_script(SCRIPT)
    call_id = waiting.interrupts[0]["value"]["call_id"]
    done = await runner.decide(waiting.thread_id, call_id, {"decision": "approve", "approver": "ana"})
    assert done.status == Terminal.SUCCESS
    with pytest.raises(ApprovalRefused, match="nothing is waiting for it"):
        await runner.decide(waiting.thread_id, call_id, {"decision": "approve"})
    with pytest.raises(ApprovalRefused, match="already decided \\(approve by ana\\); a decision is single use"):
        await approvals.decide(runner.pool, thread_id=waiting.thread_id, call_id=call_id, args_hash=waiting.interrupts[0]["value"]["args_hash"],
                               decision="approve", approver="mallory", interrupt_id=None)
    with pytest.raises(ApprovalRefused, match="no approval was requested for this call"):
        await approvals.decide(runner.pool, thread_id=waiting.thread_id, call_id="a9.9", args_hash="x", decision="approve", approver=None, interrupt_id=None)


async def test_an_expired_approval_counts_as_a_rejection(run_script, runner, workspace):
    waiting = await run_script(SCRIPT, approval_timeout_s=0.0)
    assert await runner.pending(waiting.thread_id) == []  # nobody can decide it any more: not listed as waiting for a decision
    done = await runner.resume(waiting.thread_id)
    [recorded] = await approvals.history(runner.pool, waiting.thread_id)
    assert (recorded.decision, recorded.approver) == ("reject", "boundloop:expiry")
    assert done.status == Terminal.SUCCESS
    rejected = [m for m in done.values["messages"] if getattr(m, "tool_call_id", None) == "call_actor_0_0"][0]
    assert rejected.content == "approval for workspace__move_file expired before a decision; treated as a rejection"
    assert (workspace / "notes.md").exists() and not (workspace / "a.md").exists()


async def test_an_approved_side_effect_runs_exactly_once_across_several_resumes(run_script, runner, workspace):
    (workspace / "b.md").write_text("b")
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[MOVE_A, MOVE_B]), step("done")], "critic": [CRITIC_PASS]})
    ids = {item["value"]["call_id"]: item["id"] for item in waiting.interrupts}
    first = await runner.resume(waiting.thread_id, decisions={ids["a0.0"]: {"decision": "approve"}})
    assert not (workspace / "a.md").exists() and len(first.interrupts) == 1  # approved; it runs once the turn is decided
    second = await runner.resume(waiting.thread_id)  # nothing decided: the approval stands, nothing runs yet
    assert len(second.interrupts) == 1 and not (workspace / "a.md").exists()
    done = await runner.resume(waiting.thread_id, decisions={ids["a0.1"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS
    assert {obs["call_id"]: obs["status"] for obs in done.values["observations"]} == {"a0.0": "ok", "a0.1": "ok"}
    async with runner.pool.connection() as conn:
        rows = await (await conn.execute("SELECT call_id, status FROM boundloop_ledger ORDER BY call_id")).fetchall()
    assert [(row["call_id"], row["status"]) for row in rows] == [("a0.0", "COMPLETE"), ("a0.1", "COMPLETE")]


def test_an_approval_given_from_a_new_process_after_the_waiting_process_was_killed(db_url, tmp_path):
    """`run` waits at its interactive prompt; it is SIGKILLed; `pending` and `approve` in new processes finish it."""
    workspace, run = _terminal_run(tmp_path, db_url, "--thread", "waiting-run")
    primary, secondary = pty.openpty()
    waiting = subprocess.Popen(run, stdin=secondary, stdout=secondary, stderr=secondary, env=_env())
    _wait_for_pending(db_url, "waiting-run", waiting)
    waiting.send_signal(signal.SIGKILL)
    waiting.wait(timeout=10)
    os.close(primary)
    os.close(secondary)

    listed = json.loads(subprocess.run([BOUNDLOOP, "pending", "--json", "--database-url", db_url], capture_output=True, text=True, env=_env()).stdout)
    assert [(row["thread_id"], row["call_id"], row["tool"]) for row in listed] == [("waiting-run", "a0.0", "workspace__move_file")]
    approved = subprocess.run([BOUNDLOOP, "approve", "waiting-run", "a0.0", "--as", "ana", "--json", "--database-url", db_url],
                              capture_output=True, text=True, env=_env())
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["status"] == "SUCCESS"
    assert (workspace / "a.md").read_text() == "notes"
    replay = subprocess.run([BOUNDLOOP, "approve", "waiting-run", "a0.0", "--database-url", db_url], capture_output=True, text=True, env=_env())
    assert replay.returncode == 2 and "nothing is waiting for it" in replay.stderr


def _wait_for_pending(db_url: str, thread: str, process: subprocess.Popen, within_s: float = 60) -> None:
    import time

    deadline = time.monotonic() + within_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            assert process.poll() is None, "the run ended instead of waiting for approval"
            try:
                if conn.execute("SELECT 1 FROM boundloop_approvals WHERE thread_id = %s", (thread,)).fetchone():
                    return
            except psycopg.errors.UndefinedTable:
                pass
            time.sleep(0.05)
    raise AssertionError("no approval request appeared")


@pytest.mark.parametrize("count_wait_time", [False, True])
async def test_time_waiting_for_a_human_is_charged_only_when_asked(run_script, runner, count_wait_time):
    """An hour spent waiting: by default the run goes on; counted, it trips the wall clock (600 s)."""
    waiting = await run_script(SCRIPT, count_wait_time=count_wait_time)
    async with runner.pool.connection() as conn:
        await conn.execute("UPDATE boundloop_approvals SET created_at = now() - interval '1 hour' WHERE thread_id = %s", (waiting.thread_id,))
    done = await runner.decide(waiting.thread_id, "a0.0", {"decision": "approve"})
    if count_wait_time:
        assert done.status == Terminal.TIMEOUT and done.interrupts[0]["value"]["dimension"] == "wall_clock_s"
        assert done.values["usage"]["wall_clock_s"] > 3600
    else:
        assert done.status == Terminal.SUCCESS and done.values["usage"]["wall_clock_s"] < 600


def test_the_terminal_asks_inline_and_edits_arguments_in_the_editor(db_url, tmp_path):
    """On a terminal, `run` prompts for each approval; `e` opens $EDITOR on the arguments as JSON."""
    workspace, run = _terminal_run(tmp_path, db_url)
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\necho \'{"source": "notes.md", "destination": "edited.md"}\' > "$1"\n')
    editor.chmod(0o755)
    primary, secondary = pty.openpty()
    process = subprocess.Popen(run, stdin=secondary, stdout=secondary, stderr=secondary, env=_env(EDITOR=str(editor)))
    os.close(secondary)
    screen = _read_until(primary, b"[a]pprove, [r]eject, [e]dit, re[s]pond")
    assert b"workspace__move_file" in screen
    os.write(primary, b"e\n")
    screen += _read_until(primary, b"SUCCESS")
    process.wait(timeout=60)
    os.close(primary)
    assert process.returncode == 0, screen.decode(errors="replace")
    assert (workspace / "edited.md").read_text() == "notes" and not (workspace / "a.md").exists()


def _terminal_run(tmp_path: Path, db_url: str, *extra: str) -> tuple[Path, list[str]]:
    """A workspace with notes.md, and the `boundloop run` command line whose actor asks to move it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.md").write_text("notes")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"roles": SCRIPT}))
    run = [BOUNDLOOP, "run", "tidy up", "--model", "scripted", "--script", str(script), "--workspace", str(workspace), "--database-url", db_url, *extra]
    return workspace, run


def _read_until(fd: int, marker: bytes, within_s: float = 90) -> bytes:
    import select
    import time

    seen, deadline = b"", time.monotonic() + within_s
    while marker not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{marker!r} never appeared; the screen was:\n{seen.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen
