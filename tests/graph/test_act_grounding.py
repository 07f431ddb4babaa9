"""act grounds the results of the calls it dispatched at the start of its next step (nodes/act.py):
an iteration is two graph steps (act, execute), a turn with more dispatch waves grounds between
them without asking the model, and a crash before act's save grounds again and repeats nothing."""

from __future__ import annotations

import json
import signal
import subprocess

import psycopg

from boundloop.graph.trace.replay import replay_run
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import READ_NOTES, step
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, boundloop


GROUNDED = ("verified", "committed")
"""A call's stage once act grounded it (commit promotes a verified call of the result to committed)."""


def _reads(count: int) -> list[dict]:
    """`count` reads that differ (the repeated-call breaker would refuse the same read)."""
    return [step(calls=[{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 1000 + n}}]) for n in range(count)]


async def _checkpoints(runner, thread_id: str) -> int:
    async with runner.pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,))).fetchone()
    return row[0] if isinstance(row, tuple) else row["count"]


async def test_an_iteration_is_two_graph_steps_act_and_execute(run_script, runner):
    """Three read iterations are six steps, each one checkpoint: act (reply, decisions and the
    previous results' grounding), then execute. Every result is grounded before the run ends."""
    reads = 3
    report = await run_script({"actor": [*_reads(reads), step("done")]})
    assert report.status == Terminal.SUCCESS
    calls = [obs for obs in report.values["observations"] if obs.get("phase") == "act"]
    assert len(calls) == reads and all(obs.get("grounded") and obs["stage"] in GROUNDED for obs in calls)
    steps = [event for event in await runner.trace(report.thread_id) if event["kind"] in ("node", "call")]
    assert [event["node"] for event in steps][2:2 + 2 * reads + 1] == ["act", "execute"] * reads + ["act"]  # after intake, validate_plan
    assert await _checkpoints(runner, report.thread_id) == len(steps) + 2  # one per step, the input's and START's
    assert (await replay_run(runner.pool, report.thread_id, runner.graph)).valid


async def test_a_turn_of_two_writes_grounds_between_its_waves_without_asking_the_model(run_script, runner, workspace):
    """Writes go one wave each: act grounds the first wave alone (status `observe`, no model call)
    and sends the second; the actor is asked again only once both are grounded."""
    writes = [{"name": "workspace__write_file", "args": {"path": f"out{n}.md", "content": f"v{n}\n"}} for n in (1, 2)]
    report = await run_script({"actor": [step(calls=writes), step("done")]})
    assert report.status == Terminal.SUCCESS
    assert (workspace / "out1.md").read_text() == "v1\n" and (workspace / "out2.md").read_text() == "v2\n"
    events = [event for event in await runner.trace(report.thread_id) if event["kind"] in ("node", "call")]
    assert [event["node"] for event in events][2:7] == ["act", "execute", "act", "execute", "act"]  # after intake, validate_plan
    between = events[4]["data"]
    assert "context" not in between and between["budget"]["tokens"] == 0  # grounded the first write only: no model request
    assert report.values["usage"]["calls_by_role"]["actor"] == 2
    writes_seen = [obs for obs in report.values["observations"] if obs.get("tool") == "workspace__write_file"]
    assert len(writes_seen) == 2 and all(obs["stage"] in GROUNDED for obs in writes_seen)


def test_a_crash_after_a_write_before_act_saves_its_grounding_grounds_again_and_writes_once(db_url, tmp_path):
    """Killed as the act after the write leaves (the write grounded, the next call decided, the step
    not saved): the resumed run grounds the write again from the ledger's record, never re-sends it."""
    workspace, servers, script = _crash_task(tmp_path, "regrounded", slow_s=0.1)
    killed = subprocess.run([BOUNDLOOP, *_run_args(servers, script, "regrounded", db_url)], env=_env(BOUNDLOOP_CRASH_AT="leave:act#2"),
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert (workspace / "out.md").read_text() == "result v1\n"
    resumed = boundloop("resume", "regrounded", "--json", "--database-url", db_url)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "SUCCESS"
    with psycopg.connect(db_url, autocommit=True) as conn:
        ledger = conn.execute("SELECT call_id, status FROM boundloop_ledger WHERE thread_id = 'regrounded' ORDER BY call_id").fetchall()
        sent = conn.execute("SELECT count(*) FROM boundloop_trace WHERE thread_id = 'regrounded' AND kind = 'call' "
                            "AND data->'call'->>'call_id' = 'a0.0'").fetchone()[0]
    assert ledger == [("a0.0", "COMPLETE")] and sent == 1
