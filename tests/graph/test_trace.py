"""The run trace: every field of the run trace recorded, append-only, read-only after
the run closed; the one-sentence explanation; replay of the trajectory against the compiled graph."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from boundloop.checkpoints import store
from boundloop.graph.trace.explain import explain
from boundloop.graph.trace.replay import replay_run
from boundloop.graph.core.status import Terminal
from boundloop.graph.trace.fields import missing_fields, missing_trace_fields
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import boundloop

MOVE = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "old.md"}}


async def _approved_run(run_script, runner):
    """A read, then a move a human approves (coding_assistant asks for moves): a side effect with its ledger INTENT.
    The run asks for a plan, so its trace has every phase."""
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES, MOVE]), step("done")], "critic": [CRITIC_PASS]},
                               user="tenant-a/ana", planning="always")
    [item] = waiting.interrupts
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS
    return done.thread_id


async def test_every_trace_field_is_recorded_and_replay_validates_the_run(run_script, runner):
    run_id = await _approved_run(run_script, runner)
    assert await missing_trace_fields(runner.pool, run_id) == []
    events = await runner.trace(run_id)
    nodes = [event for event in events if event["kind"] in ("node", "call")]
    header = nodes[0]["data"]["run"]
    assert header["user"] == "tenant-a/ana" and header["goal"]["goal"] == "Summarize notes.md"
    assert header["workflow_graph_version"] and header["tool_registry_version"] and header["autonomy_boundary_version"]
    assert set(header["model_versions"]) == {"planner", "actor", "judge", "critic", "goal_check"}
    assert {"planner", "actor", "judge", "critic", "goal_check"} <= set(header["prompt_template_versions"])
    assert all({"context_tokens", "memory_writes", "tokens", "cost_usd", "calls", "retries", "time_s"} <= set(e["data"]["budget"]) for e in nodes)
    assert all(e["data"]["checkpoint_id"] for e in nodes[1:])
    calls = {call["request_id"]: call for e in nodes for call in e["data"].get("tool_calls", [])}
    move = calls["a0.1"]
    assert (move["name"], move["status"], move["side_effect"]) == ("workspace__move_file", "ok", True)
    assert move["ledger_key"] and move["args_hash"] and move["observation_pointer"]
    assert [e["data"]["requests"][0]["type"] for e in events if e["kind"] == "interrupt"] == ["tool_approval"]
    approval = next(e["data"]["escalation"] for e in nodes if e["node"] == "approve")
    assert approval == {"type": "tool_approval", "call_id": "a0.1", "decision": "approve", "approver": "tenant-a/ana"}  # the run's user by default
    assert any(e["data"].get("validation", {}).get("check") == "acceptance" for e in nodes)
    assert nodes[-1]["data"]["terminal"]["code"] == "SUCCESS"

    sentence = explain(events)
    assert sentence.startswith("Allowed to act as tenant-a/ana, profile coding_assistant")
    assert "chose path intake → plan → validate_plan" in sentence and "workspace__move_file (ok)" in sentence
    assert "updated state from 2 verified observation(s) (1 side effect(s))" in sentence and sentence.endswith("terminated because SUCCESS: " + nodes[-1]["data"]["terminal"]["reason"] + ".")

    report = await replay_run(runner.pool, run_id, runner.graph)
    assert report.valid, report.problems
    assert report.transitions[0] == ("__start__", "intake") and report.transitions[-1] == ("finalize", "__end__")
    assert ("act", "approve") in report.transitions and ("approve", "act") in report.transitions


TAMPERINGS = [
    ("DELETE FROM boundloop_trace WHERE thread_id = %s AND node = 'act'", "is not an edge of the graph"),
    ("UPDATE boundloop_trace SET data = jsonb_set(data, '{decisions,1,decision}', '\"denied\"') WHERE thread_id = %s AND node = 'act'",
     "ran although the decision was 'denied'"),
    ("UPDATE boundloop_trace SET data = data - 'decisions' WHERE thread_id = %s AND node = 'act'", "no permission decision before it"),
    ("DELETE FROM boundloop_ledger WHERE thread_id = %s", "has no ledger INTENT"),
    ("UPDATE boundloop_trace SET data = jsonb_set(data, '{escalation,decision}', '\"reject\"') WHERE thread_id = %s AND node = 'approve'",
     "ran although the decision was 'ask'"),
    ("INSERT INTO boundloop_trace (thread_id, kind, node, data) VALUES (%s, 'node', 'act', '{\"step\": 1000}')", "finalize → act is not an edge"),
    # verify → commit is an edge of the graph, but verify's guard, run again, picks the critic this run asked for
    ("DELETE FROM boundloop_trace WHERE thread_id = %s AND node = 'critique'", "route_after_verify on the recorded state picks critique, but the trace records commit"),
    # Edits that leave a legal trajectory: only the hash chain shows them.
    ("UPDATE boundloop_trace SET data = jsonb_set(data, '{seconds}', '0') WHERE thread_id = %s AND node = 'plan'",
     "its content no longer matches its hash"),
    ("UPDATE boundloop_trace SET at = at - interval '1 hour' WHERE thread_id = %s AND id = (SELECT min(id) FROM boundloop_trace WHERE thread_id = %s)",
     "its content no longer matches its hash"),
    ("UPDATE boundloop_trace SET data = jsonb_set(data, '{seconds}', '0'),"
     " hash = boundloop_trace_row_hash(prev_hash, thread_id, kind, node, jsonb_set(data, '{seconds}', '0'), at)"
     " WHERE thread_id = %s AND node = 'plan'", "the event before it in the hash chain is missing"),
    ("DELETE FROM boundloop_trace WHERE thread_id = %s AND id = (SELECT min(id) FROM boundloop_trace WHERE thread_id = %s)",
     "the event before it in the hash chain is missing"),
    ("INSERT INTO boundloop_trace (thread_id, kind, node, data)"
     " SELECT thread_id, 'note', NULL, '{}' FROM boundloop_trace WHERE thread_id = %s LIMIT 1", "not in the hash chain"),
]
"""Each applied to its own copy of one valid run, as the database owner stepping around the triggers."""
COPY = """
INSERT INTO boundloop_trace (thread_id, at, kind, node, data)
SELECT %(copy)s, at, kind, node, regexp_replace(data::text, '"(bl-[0-9a-f]+)"', '"\\1-' || %(copy)s || '"', 'g')::jsonb
FROM boundloop_trace WHERE thread_id = %(run)s ORDER BY id;
INSERT INTO boundloop_ledger SELECT idempotency_key || '-' || %(copy)s, %(copy)s, call_id, step_id, tool, server, args_hash, status, result, error, created_at, updated_at
FROM boundloop_ledger WHERE thread_id = %(run)s;
INSERT INTO checkpoints SELECT %(copy)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata
FROM checkpoints WHERE thread_id = %(run)s;
INSERT INTO checkpoint_blobs SELECT %(copy)s, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = %(run)s;
INSERT INTO checkpoint_writes SELECT %(copy)s, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path
FROM checkpoint_writes WHERE thread_id = %(run)s"""
"""A copy of a run under another id: its trace (through the triggers), ledger and checkpoints."""


async def test_the_trace_is_read_only_and_replay_rejects_tampered_copies(run_script, runner, db_url):
    run_id = await _approved_run(run_script, runner)
    with psycopg.connect(db_url, autocommit=True) as conn:
        for statement in ("UPDATE boundloop_trace SET data = '{}' WHERE thread_id = %s", "DELETE FROM boundloop_trace WHERE thread_id = %s"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement, (run_id,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            conn.execute("TRUNCATE boundloop_trace")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="closed: its trace is read-only"):
        await store.append_trace(runner.pool, run_id, "node", node="act", data={"step": 99})

    for number, (tampering, problem) in enumerate(TAMPERINGS):
        copy = f"{run_id}-copy{number}"
        with psycopg.connect(db_url, autocommit=True) as conn:
            for statement in COPY.strip().split(";"):  # through the triggers: the copy gets a hash chain of its own
                conn.execute(statement, {"copy": copy, "run": run_id})
            copied = await replay_run(runner.pool, copy, runner.graph)
            assert copied.valid, copied.problems
            conn.execute("SET session_replication_role = replica")
            conn.execute(tampering, (copy,) * tampering.count("%s"))
        report = await replay_run(runner.pool, copy, runner.graph)
        assert not report.valid and any(problem in line for line in report.problems), (tampering, report.problems)


REHASH = """
DO $$ DECLARE r RECORD; prev TEXT := NULL; BEGIN
  FOR r IN SELECT id FROM boundloop_trace WHERE thread_id = '{copy}' ORDER BY id LOOP
    UPDATE boundloop_trace SET prev_hash = prev, hash = boundloop_trace_row_hash(prev, thread_id, kind, node, data, at)
    WHERE id = r.id RETURNING hash INTO prev;
  END LOOP;
  UPDATE boundloop_trace_heads SET hash = prev WHERE thread_id = '{copy}';
END $$"""
"""The owner's whole rewrite: every hash recomputed after an edit, so the chain is whole again."""


async def test_a_chain_rewritten_whole_is_caught_against_a_head_kept_outside_the_database(run_script, runner, db_url):
    run_id = await _approved_run(run_script, runner)
    copy = f"{run_id}-rewritten"
    with psycopg.connect(db_url, autocommit=True) as conn:
        for statement in COPY.strip().split(";"):
            conn.execute(statement, {"copy": copy, "run": run_id})
    shown = boundloop("show", run_id, "--database-url", db_url)
    assert re.findall(r"trace head: ([0-9a-f]{64})", shown.stdout) == [await store.trace_head(runner.pool, run_id)]
    assert json.loads(boundloop("show", run_id, "--json", "--database-url", db_url).stdout)["trace_head"] == await store.trace_head(runner.pool, run_id)
    head = await store.trace_head(runner.pool, copy)  # what an operator kept of the copy, as `show` prints it for a run
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE boundloop_trace SET data = jsonb_set(data, '{seconds}', '0') WHERE thread_id = %s AND node = 'plan'", (copy,))
        conn.execute(REHASH.format(copy=copy))
    assert (await replay_run(runner.pool, copy, runner.graph)).valid  # the chain alone is whole again
    checked = await replay_run(runner.pool, copy, runner.graph, expected_head=head)
    assert not checked.valid and any("no longer holds the head" in problem for problem in checked.problems), checked.problems
    replayed = boundloop("replay", copy, "--expect-head", head, "--database-url", db_url)
    assert replayed.returncode == 5 and "no longer holds the head" in replayed.stdout
    assert boundloop("replay", run_id, "--expect-head", await store.trace_head(runner.pool, run_id), "--database-url", db_url).returncode == 0


def _alter_checkpoint(db_url: str, serde: Any, copy: str, checkpoint_id: str, channel: str, change: Callable[[Any], Any]) -> None:
    """Change one channel's value in a saved checkpoint of `copy`, as the database owner could."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        [checkpoint] = conn.execute("SELECT checkpoint FROM checkpoints WHERE thread_id = %s AND checkpoint_id = %s", (copy, checkpoint_id)).fetchone()
        where = (copy, channel, checkpoint["channel_versions"][channel])
        kind, blob = conn.execute("SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = %s AND version = %s", where).fetchone()
        kind, blob = serde.dumps_typed(change(serde.loads_typed((kind, bytes(blob)))))
        conn.execute("UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = %s AND channel = %s AND version = %s", (kind, blob, *where))


def _critique_failed(quality: dict[str, Any]) -> dict[str, Any]:
    return {**quality, "critique": {**quality["critique"], "passed": False}}


def _out_of_time(budget: dict[str, Any]) -> dict[str, Any]:
    return {**budget, "wall_clock_s": 0.001}


STATE_TAMPERINGS = [
    ("commit", "quality", _critique_failed, "route_after_critique on the recorded state picks repair, but the trace records commit"),
    ("plan", "budget", _out_of_time, "route_after_intake on the recorded state picks escalate, but the trace records plan"),
]
"""(the step whose starting checkpoint is changed, its channel, the change, the problem replay reports):
the last critique flipped to failed, so critique → commit no longer follows; the wall-clock budget cut
below what the run had used, so intake's guard would have stopped the run."""


async def test_replay_runs_the_guards_again_on_the_recorded_state(run_script, runner, db_url):
    run_id = await _approved_run(run_script, runner)
    for number, (node, channel, change, problem) in enumerate(STATE_TAMPERINGS):
        copy = f"{run_id}-state{number}"
        with psycopg.connect(db_url, autocommit=True) as conn:
            for statement in COPY.strip().split(";"):
                conn.execute(statement, {"copy": copy, "run": run_id})
        assert (await replay_run(runner.pool, copy, runner.graph)).valid
        [started_from] = [event.data["checkpoint_id"] for event in await store.read_trace(runner.pool, copy) if event.node == node]
        _alter_checkpoint(db_url, runner.graph.checkpointer.serde, copy, started_from, channel, change)
        report = await replay_run(runner.pool, copy, runner.graph)
        assert not report.valid and problem in report.problems[0], report.problems
        replayed = boundloop("replay", copy, "--database-url", db_url)
        assert replayed.returncode == 5 and problem in replayed.stdout


async def test_a_null_or_empty_tenant_user_scope_counts_as_missing(run_script, runner, db_url):
    run_id = await _approved_run(run_script, runner)
    events = [{"kind": event.kind, "node": event.node, "data": event.data} for event in await store.read_trace(runner.pool, run_id)]
    assert missing_fields(events) == []
    intake = next(event for event in events if event["node"] == "intake")
    for scope in (None, "", "  "):
        intake["data"]["run"]["user"] = scope
        assert missing_fields(events) == ["tenant_id/user_scope"], scope
    copy = f"{run_id}-unscoped"
    with psycopg.connect(db_url, autocommit=True) as conn:
        for statement in COPY.strip().split(";"):
            conn.execute(statement, {"copy": copy, "run": run_id})
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE boundloop_trace SET data = jsonb_set(data, '{run,user}', 'null') WHERE thread_id = %s AND node = 'intake'", (copy,))
    assert await missing_trace_fields(runner.pool, copy) == ["tenant_id/user_scope"]
    assert "trace complete: no, missing tenant_id/user_scope" in boundloop("show", copy, "--database-url", db_url).stdout
