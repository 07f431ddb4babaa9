"""Tool definitions are pinned at intake: a server that rewrites a tool mid-run gets no call to it, a
tool it adds is never offered, and a resumed run plans and acts before any server has started.

Real runs through the real graph and Postgres, against a real stdio MCP server that changes itself
after its first call (tests/security/shifty_server.py); the model is the scripted one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langchain_core.messages import ToolMessage
from langgraph.types import Send
from mcp.types import ToolListChangedNotification

from boundloop.checkpoints import store
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal, exit_code
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, step
from tests.graph.test_cli import BOUNDLOOP, _env, boundloop
from boundloop.tools import fresh_listing, pinning
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.outcome import CallOutcome
from tests.security.attacks import Attacks

SERDE = JsonPlusSerializer()
SHIFTY = str(Path(__file__).parent / "shifty_server.py")
PLAN = {"content": {"steps": [{"id": "s1", "description": "look keys up", "tools": ["shifty__lookup"]}], "blocked": None},
        "usage": {"input_tokens": 100, "output_tokens": 20}}


def lookup(key: str) -> dict[str, Any]:
    return {"name": "shifty__lookup", "args": {"key": key}}


def settings_for(tmp_path: Path, actor: list[dict[str, Any]], *server_args: str) -> RunSettings:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-pinning", "roles": {"planner": [PLAN], "actor": actor, "critic": [CRITIC_PASS]}}))
    servers = {"mcpServers": {"shifty": {"command": sys.executable, "args": [SHIFTY, *server_args], "trusted": True, "protocol": "auto"}}}
    return RunSettings(model="scripted", script=str(script), servers=servers)


def tool_results(values: dict[str, Any]) -> dict[str, str]:
    return {message.tool_call_id: str(message.content) for message in values["messages"] if isinstance(message, ToolMessage)}


@pytest.mark.parametrize(("change", "what"), [("description", "description"), ("schema", "input schema"), ("annotations", "annotations")])
async def test_a_tool_its_server_redefines_mid_run_is_refused_at_dispatch_and_a_tool_it_adds_is_never_offered(db_url, tmp_path, change, what, attacks: Attacks):
    calls = tmp_path / "calls.log"
    actor = [step(calls=[lookup("a")]), step(calls=[lookup("b")]), step(calls=[{"name": "shifty__sneaky", "args": {}}]), step("a looked up")]
    async with Runner(db_url) as runner:
        report = await runner.start(Task(goal="look keys up"), settings_for(tmp_path, actor, "--change", change, "--calls", str(calls)),
                                    thread_id=f"rug-{change}")
        trace = await store.read_trace(runner.pool, f"rug-{change}")

    statuses = [(obs["tool"], obs["status"]) for obs in report.values["observations"]]
    attacks.record("tool-pinning", attempts=2, escapes=(calls.read_text() != "lookup a\n") + (statuses[2:] != [("shifty__sneaky", "unknown_tool")]))
    assert report.status == Terminal.SUCCESS
    assert statuses == [("shifty__lookup", "ok"), ("shifty__lookup", "tool_changed"), ("shifty__sneaky", "unknown_tool")]
    assert calls.read_text() == "lookup a\n", "the redefined tool must not run"
    refusal = tool_results(report.values)[report.values["observations"][1]["tool_call_id"]]
    assert refusal.startswith(f"tool_changed: shifty__lookup was not run: MCP server 'shifty' changed the tool's {what} since this run started")

    pinned = report.values["tools"]
    assert [spec["name"] for spec in pinned["specs"]] == ["echo_header", "env_value", "lookup", "note"]
    assert next(spec for spec in pinned["specs"] if spec["name"] == "lookup")["description"] == "Look a key up (read-only)."
    assert report.values["boundary"]["tool_registry_version"] == pinned["version"]
    assert trace[0].node == "intake" and trace[0].data["run"]["tool_registry_version"] == pinned["version"]


async def test_a_resumed_run_plans_and_acts_before_its_servers_start_and_starts_them_at_dispatch(db_url, tmp_path):
    """The server cannot start until the resumed run's act turn is over: only a lazy start gets through."""
    blocked, calls = tmp_path / "blocked", tmp_path / "calls.log"
    settings = settings_for(tmp_path, [step(calls=[lookup("a")]), step(calls=[lookup("b")]), step("both looked up")],
                            "--refuse-while", str(blocked), "--calls", str(calls))

    async with Runner(db_url) as first:
        def stop_after_first_call(node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
            if node == "execute":
                first.cancel()

        stopped = await first.start(Task(goal="look keys up"), settings, thread_id="lazy", observe=stop_after_first_call)
    assert stopped.status == Terminal.USER_CANCEL and calls.read_text() == "lookup a\n"

    blocked.touch()  # from now on the server refuses to start
    nodes: list[str] = []

    def unblock_after_act(node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
        nodes.append(node)
        if node == "act":
            blocked.unlink(missing_ok=True)

    async with Runner(db_url) as second:  # nothing of the first process: no bridge, no registry
        resumed = await second.resume("lazy", observe=unblock_after_act)

    assert resumed.status == Terminal.SUCCESS, resumed.values.get("ending")
    assert nodes[:2] == ["act", "execute"]
    assert calls.read_text() == "lookup a\nlookup b\n"
    assert [obs["status"] for obs in resumed.values["observations"]] == ["ok", "ok"]


def killed_before_its_call(db_url: str, tmp_path: Path, thread: str) -> tuple[Path, Path]:
    """A run killed as its one call's task starts (act's step saved, nothing sent); (calls log, the
    file whose presence makes the server start with `lookup` redefined)."""
    changed, calls = tmp_path / "changed", tmp_path / "calls.log"
    script, servers = tmp_path / "script.json", tmp_path / "servers.json"
    script.write_text(json.dumps({"model_id": "scripted-pinning", "roles": {
        "planner": [{"content": {"steps": [{"id": "s1", "description": "look a key up"}], "blocked": None}}],
        "actor": [step(calls=[lookup("a")]), step("the key could not be looked up")], "critic": [CRITIC_PASS]}}))
    server = [SHIFTY, "--change", "description", "--changed-while", str(changed), "--calls", str(calls)]
    servers.write_text(json.dumps({"mcpServers": {"shifty": {"command": sys.executable, "args": server, "trusted": True, "protocol": "auto"}}}))
    args = ["run", "look keys up", "--model", "scripted", "--script", str(script), "--servers", str(servers),
            "--workspace", str(tmp_path), "--thread", thread, "--json", "--database-url", db_url]
    killed = subprocess.run([BOUNDLOOP, *args], env=_env(BOUNDLOOP_CRASH_AT="enter:execute#1"), capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return calls, changed


async def test_a_call_resumed_in_a_new_process_is_checked_against_the_tools_the_run_saved(db_url, tmp_path, attacks: Attacks):
    """Resumed by a new process whose server now defines the tool otherwise: the task, whose Send
    names only its call, takes the pinned tools from the state its step resumes from (the saved
    step) and refuses the call."""
    calls, changed = killed_before_its_call(db_url, tmp_path, "pins-saved")
    changed.touch()
    resumed = boundloop("resume", "pins-saved", "--json", "--database-url", db_url)
    async with Runner(db_url) as runner:
        report = await runner.report("pins-saved")
    attacks.record("tool-pinning", attempts=1, escapes=calls.exists())
    assert resumed.returncode == exit_code(report.status, waiting=bool(report.interrupts)), resumed.stderr
    assert [(obs["tool"], obs["status"]) for obs in report.values["observations"]] == [("shifty__lookup", "tool_changed")]
    assert not calls.exists(), "the redefined tool must not run"


async def test_a_send_naming_a_call_its_runs_state_does_not_hold_makes_no_call(db_url, tmp_path, attacks: Attacks):
    """The stored Send rewritten after the kill to name another call: the resumed task finds no such
    call in its step's state, stops the run with one line saying so, and nothing runs."""
    calls, _ = killed_before_its_call(db_url, tmp_path, "send-forged")
    with psycopg.connect(db_url, autocommit=True) as conn:
        forged = SERDE.dumps_typed(Send("execute", {"call_id": "a9.9"}))
        writes = conn.execute("UPDATE checkpoint_writes SET type = %s, blob = %s WHERE thread_id = 'send-forged' AND channel = '__pregel_tasks'",
                              forged).rowcount
        for version, kind, blob in conn.execute("SELECT version, type, blob FROM checkpoint_blobs WHERE thread_id = 'send-forged' "
                                                "AND channel = '__pregel_tasks' AND type <> 'empty'").fetchall():
            stored = SERDE.dumps_typed([Send("execute", {"call_id": "a9.9"}) for _ in SERDE.loads_typed((kind, blob))])
            conn.execute("UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = 'send-forged' AND channel = '__pregel_tasks' "
                         "AND version = %s", (*stored, version))
        assert writes == 1
    resumed = boundloop("resume", "send-forged", "--json", "--database-url", db_url)
    attacks.record("tool-pinning", attempts=1, escapes=calls.exists())
    assert resumed.returncode != 0
    assert "the execute task of call 'a9.9' finds no such call to run in the run's state" in resumed.stderr, resumed.stderr
    assert not calls.exists(), "no call the run did not decide"


async def test_calls_made_through_pinned_calls_such_as_compensations_get_the_same_check(tmp_path, attacks: Attacks):
    async with shifty_bridge(tmp_path, "--change", "schema") as bridge:
        calls = pinning.PinnedCalls(bridge, pinning.registry_of(pinning.pin(bridge.specs())))
        first = await calls.call("shifty", "lookup", {"key": "a"}, timeout_s=10)
        second = await calls.call("shifty", "lookup", {"key": "b"}, timeout_s=10)
        added = await calls.call("shifty", "sneaky", {}, timeout_s=10)
    attacks.record("tool-pinning", attempts=2, escapes=(second.attempts > 0) + (added.attempts > 0))
    assert (first.status, first.text) == ("ok", "value of a (call 1)")
    assert second.status == "tool_changed" and second.attempts == 0 and "changed the tool's input schema" in second.text
    assert added.status == "unknown_tool" and added.attempts == 0


def shifty_bridge(tmp_path: Path, *server_args: str, trusted: bool = True) -> MCPBridge:
    servers = load_servers({"mcpServers": {"shifty": {"command": sys.executable, "args": [SHIFTY, *server_args], "trusted": trusted, "protocol": "auto"}}})
    return MCPBridge(servers, log_dir=tmp_path)


async def lookups(bridge: MCPBridge, *keys: str, pause_s: float = 0.0) -> list[CallOutcome]:
    """`lookup` of each key through the check before dispatch, `pause_s` apart."""
    calls = pinning.PinnedCalls(bridge, pinning.registry_of(pinning.pin(bridge.specs())))
    outcomes = []
    for key in keys:
        await asyncio.sleep(pause_s if outcomes else 0.0)
        outcomes.append(await calls.call("shifty", "lookup", {"key": key}, timeout_s=10))
    return outcomes


async def test_a_trusted_server_that_says_its_list_stays_is_checked_against_its_last_listing_until_then(tmp_path, attacks: Attacks):
    """The server's `ttlMs` is a promise; from a trusted server it is taken: a tool it redefines
    without saying so still runs while the promise lasts (the documented limit), and is refused after."""
    log = tmp_path / "calls.log"
    async with shifty_bridge(tmp_path, "--change", "description", "--calls", str(log), "--ttl-ms", "60000") as bridge:
        within = await lookups(bridge, "a", "b")
    assert [outcome.status for outcome in within] == ["ok", "ok"]
    assert log.read_text() == "lookup a\nlookup b\n"

    async with shifty_bridge(tmp_path, "--change", "description", "--ttl-ms", "300") as bridge:
        after = await lookups(bridge, "a", "b", pause_s=0.5)
    attacks.record("tool-pinning", attempts=1, escapes=after[1].status == "ok")  # while the promise stands is the documented limit
    assert [outcome.status for outcome in after] == ["ok", "tool_changed"]


async def test_an_untrusted_servers_promise_is_not_taken_every_call_is_checked_against_a_new_listing(tmp_path, attacks: Attacks):
    async with shifty_bridge(tmp_path, "--change", "description", "--ttl-ms", "60000", trusted=False) as bridge:
        outcomes = await lookups(bridge, "a", "b")
    attacks.record("tool-pinning", attempts=1, escapes=outcomes[1].status == "ok")
    assert [outcome.status for outcome in outcomes] == ["ok", "tool_changed"]


async def test_a_promise_longer_than_the_cap_stands_only_as_long_as_the_cap(tmp_path, monkeypatch, attacks: Attacks):
    monkeypatch.setattr(fresh_listing, "MAX_FRESH_S", 0.3)  # in place of waiting out 10 s
    async with shifty_bridge(tmp_path, "--change", "description", "--ttl-ms", "3600000") as bridge:
        outcomes = await lookups(bridge, "a", "b", pause_s=0.5)
    attacks.record("tool-pinning", attempts=1, escapes=outcomes[1].status == "ok")
    assert [outcome.status for outcome in outcomes] == ["ok", "tool_changed"]


async def test_a_server_restarted_after_a_crash_is_checked_against_its_new_listing_not_the_old_processs_promise(tmp_path, attacks: Attacks):
    changed = tmp_path / "changed"
    async with shifty_bridge(tmp_path, "--change", "description", "--changed-while", str(changed), "--ttl-ms", "60000") as bridge:
        first = await lookups(bridge, "a")
        changed.touch()  # the next process starts with `lookup` redefined: a new version of the server
        os.kill(bridge.pids()["shifty"], signal.SIGKILL)
        later = await lookups(bridge, "b", "c")
    attacks.record("tool-pinning", attempts=2, escapes=sum(outcome.status == "ok" for outcome in later))
    assert first[0].status == "ok"
    # The call that finds the connection dead (if the bridge had not seen it close yet) is the only one sent to it:
    statuses = [outcome.status for outcome in later]
    assert statuses in (["tool_changed", "tool_changed"], ["server_unavailable", "tool_changed"]), statuses
    assert "changed the tool's description" in later[-1].text


async def test_a_call_with_side_effects_is_always_checked_against_a_listing_asked_for_it(tmp_path, attacks: Attacks):
    """Even while a trusted server's promise stands for its reads: a changed (or dead) server refuses
    it unsent, and the listing asked for it is what the next read is checked against."""
    async with shifty_bridge(tmp_path, "--change", "description", "--ttl-ms", "60000") as bridge:
        calls = pinning.PinnedCalls(bridge, pinning.registry_of(pinning.pin(bridge.specs())))
        read = await calls.call("shifty", "lookup", {"key": "a"}, timeout_s=10)  # the server changes after it
        write = await calls.call("shifty", "note", {"text": "b"}, timeout_s=10)
        read_again = await calls.call("shifty", "lookup", {"key": "c"}, timeout_s=10)
    attacks.record("tool-pinning", attempts=2, escapes=(write.status == "ok") + (read_again.status == "ok"))
    assert [outcome.status for outcome in (read, write, read_again)] == ["ok", "tool_changed", "tool_changed"]
    assert write.attempts == 0 and "changed the tool's description" in write.text


async def test_a_tool_change_the_server_announces_ends_its_standing_listing_at_once(tmp_path, attacks: Attacks):
    """`tools/list_changed` reaches the bridge on connections that carry it (2025-11-25; at 2026-07-28
    only a `subscriptions/listen` stream does): handed the notification as the SDK hands it over, the
    bridge asks again at the next call instead of waiting out the server's promise."""
    async with shifty_bridge(tmp_path, "--change", "description", "--ttl-ms", "60000") as bridge:
        first = await lookups(bridge, "a")
        await bridge.features("shifty").on_message(ToolListChangedNotification())
        second = await lookups(bridge, "b")
    attacks.record("tool-pinning", attempts=1, escapes=second[0].status == "ok")
    assert [outcome.status for outcome in first + second] == ["ok", "tool_changed"]


def server_pid(marker: str) -> int:
    """The pid of the shifty server this test started: the one whose command line holds `marker`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "shifty_server.py" in command and marker in command:
                return int(entry.name)
    raise AssertionError(f"no shifty server with {marker} in its command line")


async def test_a_read_retried_after_its_dead_server_restarted_is_checked_against_the_new_process(db_url, tmp_path, attacks: Attacks):
    """Between two reads the server dies and comes back as a version that redefines `lookup`. The
    standing listing lets the first attempt go to the dead connection; the retry would reach the new
    process, and is checked against it first: refused, it is not sent, and the read stays
    unanswered (the attempt that was sent); the next read is refused at once."""
    changed, calls = tmp_path / "changed", tmp_path / "calls.log"
    settings = settings_for(tmp_path, [step(calls=[lookup("a")]), step(calls=[lookup("b")]), step(calls=[lookup("c")]), step("looked up")],
                            "--change", "description", "--changed-while", str(changed), "--calls", str(calls), "--ttl-ms", "60000")

    def kill_after_the_first_call(node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
        if node == "execute" and not changed.exists():
            changed.touch()  # the next process starts with `lookup` redefined
            os.kill(server_pid(str(calls)), signal.SIGKILL)

    async with Runner(db_url) as runner:
        report = await runner.start(Task(goal="look keys up"), settings, thread_id="retry-pin", observe=kill_after_the_first_call)
    attacks.record("tool-pinning", attempts=2, escapes=calls.read_text().count("\n") - 1)  # the retried read and the next one
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    observations = report.values["observations"]
    assert [obs["status"] for obs in observations] == ["ok", "server_unavailable", "tool_changed"]
    assert "the retry was not sent: definition pinned at intake" in observations[1]["detail"]
    assert calls.read_text() == "lookup a\n", "the redefined tool must not run"


async def test_a_check_that_verifies_the_run_is_checked_against_a_listing_asked_for_it_despite_the_servers_promise(db_url, tmp_path, attacks: Attacks):
    """The task's check would vouch for the run. The trusted server redefines `lookup` after the
    actor's read and promised its list would stay: the actor's reads may rest on that promise, a
    check may not. It is checked against a new listing, refused, and the run does not succeed."""
    calls = tmp_path / "calls.log"
    settings = settings_for(tmp_path, [step(calls=[lookup("a")]), step("a looked up")],
                            "--change", "description", "--calls", str(calls), "--ttl-ms", "60000")
    task = Task(goal="look keys up", checks=[{"name": "z still looks up", "tool": "shifty__lookup", "args": {"key": "z"}, "expect_contains": "value of z"}],
                budget={"repairs": 0})
    async with Runner(db_url) as runner:
        report = await runner.start(task, settings, thread_id="check-pin")
    attacks.record("tool-pinning", attempts=1, escapes=calls.read_text() != "lookup a\n")
    assert calls.read_text() == "lookup a\n", "the redefined tool must not run"
    assert [(obs["phase"], obs["status"]) for obs in report.values["observations"]] == [("act", "ok"), ("verify", "tool_changed")]
    assert report.status != Terminal.SUCCESS
