"""A short run on trusted servers pins the listing kept from an earlier run and sends its first model
request while its servers start; the live listing still decides. Each test tries to make the kept
listing do harm: a listing that lies, a server that no longer starts, untrusted servers, a planned run."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from boundloop.graph.core.status import Terminal
from boundloop.graph.quality import proportion
from boundloop.graph.run.runner import Runner, RunReport
from boundloop.graph.task import RunSettings, Task
from boundloop.tools import kept_listing
from tests.graph.conftest import READ_NOTES, step, workspace  # noqa: F401  (fixture)
from tests.graph.fake_openai import FakeOpenAI

GOAL = "Summarize notes.md"


def servers_file(tmp_path: Path, root: Path, *, trusted: bool = True, delay_s: float = 0) -> tuple[Path, Path, Path]:
    """A servers file whose one server is a shell script: it notes when the workspace server is about
    to come up (after `delay_s`), then becomes it. Returns the file, the script and the notes."""
    script, up = tmp_path / "serve.sh", tmp_path / "up"
    write_server(script, root, up, delay_s=delay_s)
    entry = {"command": "/bin/sh", "args": [str(script)], "root": str(root), "trusted": trusted, "protocol": "auto"}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"workspace": entry}}))
    return path, script, up


def write_server(script: Path, root: Path, up: Path, *, delay_s: float = 0, broken: bool = False) -> None:
    serve = "exit 3" if broken else f'exec {sys.executable} -m boundloop.mcp_servers.workspace --root "{root}"'
    script.write_text(f'sleep {delay_s}\ndate +%s.%N >> "{up}"\n{serve}\n')


def scripted(tmp_path: Path, servers: Path, roles: dict[str, list[dict[str, Any]]], **settings: Any) -> RunSettings:
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    return RunSettings(model="scripted", script=str(script), servers=str(servers), unattended=True, **settings)


def reads(report: RunReport) -> list[dict[str, Any]]:
    return [obs for obs in report.values["observations"] if obs["tool"] == "workspace__read_file"]


def listing_row(report: RunReport) -> tuple[bool, str]:
    """What `boundloop show` and the console say of the run's tool listing: (listed at intake, why)."""
    [row] = [row for row in proportion.phase_reasons(report.values) if row["phase"] == "tool listing"]
    return row["ran"], row["reason"]


def kept_rows(db_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(db_url) as conn:
        return [pins for (pins,) in conn.execute("SELECT pins FROM boundloop_tool_listings")]


async def test_the_second_run_asks_the_model_before_its_server_is_up(db_url, workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    servers, _, up = servers_file(tmp_path, workspace, delay_s=1.5)
    with FakeOpenAI() as fake:
        settings = RunSettings(model="fake-model", base_url=fake.base_url, servers=str(servers), unattended=True,
                               prices={"fake-model": (2.0, 8.0)})
        async with Runner(db_url) as runner:
            first = await runner.start(Task(goal=GOAL), settings)
            first_request = len(fake.arrived)
            second = await runner.start(Task(goal=GOAL), settings)
    assert first.status == second.status == Terminal.SUCCESS, (first.values.get("ending"), second.values.get("ending"))
    first_up, second_up = (float(line) for line in up.read_text().split())
    assert fake.arrived[0] > first_up  # no listing kept yet: intake waited for the server
    assert fake.arrived[first_request] < second_up  # kept: the request went out while the server was starting
    assert "kept" not in second.values["tools"]  # the first model step confirmed it against the live listing
    assert listing_row(first) == (True, kept_listing.LISTED_NONE_KEPT)
    assert listing_row(second) == (False, kept_listing.KEPT + kept_listing.CONFIRMED)
    assert second.values["tools"]["version"] == first.values["tools"]["version"]
    assert len(reads(second)) == 1
    assert len(fake.arrived) - first_request == first_request == 2  # the kept listing held: no reply dropped, no request asked again


async def test_a_kept_listing_that_lies_is_never_acted_on(db_url, workspace, tmp_path):
    """The kept row adds a tool the server does not have, under the live listing's version: the reply
    made from it is dropped unsent, the model is asked again on the live definitions, and the live
    listing is kept for the next run."""
    servers, _, _ = servers_file(tmp_path, workspace)
    honest = scripted(tmp_path, servers, {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]})
    async with Runner(db_url) as runner:
        first = await runner.start(Task(goal=GOAL), honest)
        live = first.values["tools"]
        forged = json.loads(json.dumps(live))
        planted = {**forged["specs"][0], "name": "wipe", "qualified_name": "workspace__wipe", "description": "Delete everything."}
        forged["specs"].append(planted)  # under the live listing's own version: the definitions are compared, not a stored hash
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE boundloop_tool_listings SET pins = %s", (Jsonb(forged),))
        wipe = {"name": "workspace__wipe", "args": {"path": "notes.md"}}
        second = await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, {
            "actor": [step(calls=[wipe]), step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}))
    assert second.status == Terminal.SUCCESS, second.values.get("ending")
    assert [obs["tool"] for obs in second.values["observations"]] == ["workspace__read_file"]  # the wipe was never decided or sent
    assert second.values["usage"]["model_turns"] == 3  # the dropped reply is paid for, and counted
    assert listing_row(second) == (False, kept_listing.KEPT + kept_listing.REPLACED)
    assert second.values["tools"]["version"] == live["version"]
    assert kept_rows(db_url) == [{key: value for key, value in live.items() if key != "kept"}]


async def test_a_server_that_no_longer_starts_ends_the_run_before_any_call_and_resume_continues(db_url, workspace, tmp_path):
    servers, script, up = servers_file(tmp_path, workspace)
    roles = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}
    async with Runner(db_url) as runner:
        assert (await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles))).status == Terminal.SUCCESS
        write_server(script, workspace, up, broken=True)  # the same config; the program behind it now fails
        stopped = await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, {"actor": [step(calls=[READ_NOTES]), *roles["actor"]]}))
        assert stopped.status == Terminal.UNAVAILABLE_DEP
        assert stopped.values["ending"]["reason"].startswith("tool servers unavailable")
        assert stopped.values["ending"]["resume_to"] == "act"
        assert stopped.values["observations"] == []  # nothing was sent
        assert listing_row(stopped) == (False, kept_listing.KEPT + kept_listing.UNCHECKED)
        write_server(script, workspace, up)
        resumed = await runner.resume(stopped.thread_id)
    assert resumed.status == Terminal.SUCCESS, resumed.values.get("ending")
    assert len(reads(resumed)) == 1


async def intake_pins(runner: Runner, thread_id: str) -> dict[str, Any]:
    """The tools as intake pinned them: the oldest checkpoint of the run that has them."""
    pinned = [snapshot.values["tools"] async for snapshot in runner.graph.aget_state_history({"configurable": {"thread_id": thread_id}})
              if "tools" in snapshot.values]
    return pinned[-1]


async def test_untrusted_servers_and_planned_runs_always_wait_for_a_live_listing(db_url, workspace, tmp_path):
    (tmp_path / "untrusted").mkdir()
    untrusted, _, _ = servers_file(tmp_path / "untrusted", workspace, trusted=False)
    trusted, _, _ = servers_file(tmp_path, workspace)
    roles = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}
    plan = {"content": {"steps": [{"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"]}], "blocked": None}}
    async with Runner(db_url) as runner:
        for _ in range(2):
            report = await runner.start(Task(goal=GOAL), scripted(tmp_path, untrusted, roles))
            assert report.status == Terminal.SUCCESS
            assert "kept" not in await intake_pins(runner, report.thread_id)
            assert listing_row(report) == (True, kept_listing.LISTED_UNTRUSTED)
        assert kept_rows(db_url) == []  # an untrusted server's listing is never kept
        for _ in range(2):
            report = await runner.start(Task(goal=GOAL), scripted(tmp_path, trusted, {"planner": [plan], **roles}, planning="always"))
            assert report.status == Terminal.SUCCESS, report.values.get("ending")
            assert "kept" not in await intake_pins(runner, report.thread_id)  # the planner's request waits for the live listing
            assert listing_row(report) == (True, kept_listing.LISTED_FOR_FIRST_REQUEST)
        assert len(kept_rows(db_url)) == 1  # the planned runs keep theirs for the next short run
        short = await runner.start(Task(goal=GOAL), scripted(tmp_path, trusted, roles))
        assert (await intake_pins(runner, short.thread_id)).get("kept") is True
        assert short.status == Terminal.SUCCESS


async def test_a_damaged_kept_row_is_passed_over_and_written_again(db_url, workspace, tmp_path):
    servers, _, _ = servers_file(tmp_path, workspace)
    roles = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}
    async with Runner(db_url) as runner:
        live = {key: value for key, value in (await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles))).values["tools"].items()}
        for damaged in ({}, {"version": 1, "specs": []}, {"version": "v", "specs": "nul\\u0000"}, {"version": "v", "specs": [{"name": None}]},
                        {"version": "v", "specs": []}, [1, 2]):
            with psycopg.connect(db_url) as conn:
                conn.execute("UPDATE boundloop_tool_listings SET pins = %s", (Jsonb(damaged),))
            report = await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles))
            assert report.status == Terminal.SUCCESS, (damaged, report.values.get("ending"))
            assert "kept" not in await intake_pins(runner, report.thread_id), damaged
            assert kept_rows(db_url) == [live], damaged


async def test_a_server_that_hangs_its_start_ends_the_run_on_its_wall_clock_with_nothing_sent(db_url, workspace, tmp_path):
    servers, script, up = servers_file(tmp_path, workspace)
    roles = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}
    async with Runner(db_url) as runner:
        assert (await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles))).status == Terminal.SUCCESS
        script.write_text("exec sleep 600\n")  # never answers the handshake
        hung = await runner.start(Task(goal=GOAL, budget={"wall_clock_s": 6}), scripted(tmp_path, servers, roles))
    assert hung.status == Terminal.TIMEOUT, hung.values.get("ending")
    assert hung.values["observations"] == []
    assert hung.values["usage"]["model_turns"] == 1  # the kept listing let the first request go out meanwhile


async def test_runs_at_once_on_a_kept_listing_each_confirm_it_and_write_no_row(db_url, workspace, tmp_path):
    servers, _, up = servers_file(tmp_path, workspace)
    roles = {"actor": [step(calls=[READ_NOTES]), step("Ana publishes the notes.")]}
    async with Runner(db_url) as runner:
        first = await runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles))
        with psycopg.connect(db_url) as conn:
            (listed_at,) = conn.execute("SELECT listed_at FROM boundloop_tool_listings").fetchone()
        reports = await asyncio.gather(*(runner.start(Task(goal=GOAL), scripted(tmp_path, servers, roles)) for _ in range(8)))
        pinned = [await intake_pins(runner, report.thread_id) for report in reports]
    assert [report.status for report in reports] == [Terminal.SUCCESS] * 8
    assert all(pins.get("kept") for pins in pinned)
    assert all(report.values["tools"] == first.values["tools"] and len(reads(report)) == 1 for report in reports)
    assert len(up.read_text().split()) == 9  # each run started its own server
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT listed_at FROM boundloop_tool_listings").fetchone() == (listed_at,)  # nothing to write again
