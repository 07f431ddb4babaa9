"""act gates its own reply: the reply and the decision on each call are one step, one checkpoint,
and a call is dispatched only from decisions already saved (nodes/act.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import typing

import psycopg

from boundloop.graph.trace.replay import replay_run
from boundloop.graph.state import MERGED_BY, LoopState
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, boundloop

UNKNOWN = {"name": "workspace__no_such_tool", "args": {}}


def test_the_state_the_gate_decides_from_merges_every_channel_as_the_graph_does():
    """A channel with a reducer that `applied` replaced instead would let the gate decide on a stale
    or truncated state (the usage it reserves against, the messages it answers)."""
    hints = typing.get_type_hints(LoopState, include_extras=True)
    reduced = {name for name, hint in hints.items() if typing.get_origin(hint) is typing.Annotated}
    assert reduced == set(MERGED_BY)


async def test_a_turn_whose_every_call_is_refused_goes_from_act_straight_back_to_act(run_script, runner):
    """No dispatch, nothing to ground: the refusal is the call's one result, saved with the reply."""
    report = await run_script({"actor": [step(calls=[UNKNOWN]), step(calls=[READ_NOTES]), step("done")]})
    assert report.status == Terminal.SUCCESS
    nodes = [event["node"] for event in await runner.trace(report.thread_id) if event["kind"] == "node"]
    assert nodes[:5] == ["intake", "validate_plan", "act", "act", "act"]
    first = next(event["data"] for event in await runner.trace(report.thread_id) if event["node"] == "act")
    assert [decision["decision"] for decision in first["decisions"]] == ["unknown_tool"]
    replayed = await replay_run(runner.pool, report.thread_id, runner.graph)
    assert replayed.valid, replayed.problems
    assert ("act", "act") in replayed.transitions and ("act", "execute") in replayed.transitions
    results = [message for message in report.values["messages"] if message.type == "tool"]
    assert [message.tool_call_id for message in results] == [call["id"] for message in report.values["messages"]
                                                             if message.type == "ai" for call in message.tool_calls]


def test_a_crash_after_the_reply_and_its_decisions_but_before_the_save_re_asks_and_runs_the_call_once(db_url, tmp_path):
    """Killed as act leaves (the write decided, the step not saved): nothing was dispatched; the
    resumed run asks the model again, decides again, and writes the file exactly once."""
    workspace, servers, script = _crash_task(tmp_path, "unsaved", slow_s=0.1)
    killed = subprocess.run([BOUNDLOOP, *_run_args(servers, script, "unsaved", db_url)], env=_env(BOUNDLOOP_CRASH_AT="leave:act#1"),
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert not (workspace / "out.md").exists()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM boundloop_ledger WHERE thread_id = 'unsaved'").fetchone()[0] == 0
    resumed = boundloop("resume", "unsaved", "--json", "--database-url", db_url)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "SUCCESS"
    assert (workspace / "out.md").read_text() == "result v1\n"
    with psycopg.connect(db_url, autocommit=True) as conn:
        decided = conn.execute("SELECT data->'decisions'->0->>'call_id' FROM boundloop_trace WHERE thread_id = 'unsaved' "
                               "AND node = 'act' ORDER BY id").fetchall()
        ledger = conn.execute("SELECT call_id, status FROM boundloop_ledger WHERE thread_id = 'unsaved' ORDER BY call_id").fetchall()
    # the lost attempt's step was never saved, so neither was its trace event: the re-ask's decision is the only one
    assert [call_id for (call_id,) in decided].count("a0.0") == 1 and decided[0] == ("a0.0",)
    assert ledger == [("a0.0", "COMPLETE")]
