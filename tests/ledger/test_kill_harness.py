"""The kill harness: SIGKILL a real run at every crash point it passes, resume it in a new process,
and require exactly what the uninterrupted run did — the same files, the same records (versions
included, so an update applied twice shows), one COMPLETE ledger row per side-effecting call.

Everything is real: the `boundloop` CLI in subprocesses, the workspace and records MCP servers
over stdio, Postgres. Every kill point gets its own workspace, records database and thread, so
kill points run side by side. The killed runs start their processes through a forkserver
(tests/ledger/forkserver.py) that skips re-importing LangGraph and the MCP SDK in each one;
the uninterrupted run starts them directly, so the comparison also checks the two agree.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from boundloop.graph.core.status import Exit, Terminal
from tests.graph.conftest import CRITIC_PASS, step

REPO = Path(__file__).resolve().parents[2]
BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
PROBE_SERVER = REPO / "tests" / "tools" / "servers" / "probe_server.py"
LAUNCH = Path(__file__).with_name("launch.py")
DIRECT = {
    "boundloop": [BOUNDLOOP],
    "workspace": [sys.executable, "-m", "boundloop.mcp_servers.workspace"],
    "records": [sys.executable, "-m", "boundloop.mcp_servers.records"],
    "probe": [sys.executable, str(PROBE_SERVER)],
}
"""How each process starts without the forkserver: the installed script, the servers' modules."""
PROCESS_TIMEOUT_S = 120
MAX_RESUMES = 3
PARALLEL_KILL_POINTS = 3
MIN_KILL_POINTS = 41
"""The points the run passes: fewer since act gates its own calls and grounds their results (no gate
or observe node to enter and leave), and since an answer that proposes no memory goes from commit
to finalize (no remember node)."""

POLICY = {"rules": [
    {"id": "kill_harness.records", "action": "allow", "server": "records", "tool": "*_record",
     "reason": "The harness's record writes run without a human."},
    {"id": "kill_harness.notes", "action": "allow", "server": "probe", "tool": "write_note",
     "reason": "The harness's note writes run without a human."},
]}
"""Under coding_assistant every records write and the probe's write_note would ask a human."""

TICKET = {"collection": "tickets", "id": "T-1"}
SIDE_EFFECTS = [
    {"name": "workspace__write_file", "args": {"path": "report.md", "content": "# Incident\n\nstatus: draft\n"}},
    {"name": "records__create_record", "args": {**TICKET, "data": {"title": "disk full on db-2", "status": "open", "owner": "ana"}}},
    {"name": "records__update_record", "args": {**TICKET, "data": {"status": "resolved", "resolution": "rotated the logs"}}},
    {"name": "workspace__write_file", "args": {"path": "report.md", "content": "# Incident\n\nstatus: resolved (T-1)\n"}},
]
READS = [
    {"name": "workspace__read_file", "args": {"path": "report.md"}},
    {"name": "records__get_record", "args": dict(TICKET)},
]
PLAN = {
    "content": {
        "steps": [
            {"id": "draft", "description": "Write a draft report.md", "tools": ["workspace__write_file"]},
            {"id": "open", "description": "Open ticket T-1", "tools": ["records__create_record"]},
            {"id": "resolve", "description": "Resolve ticket T-1", "depends_on": ["open"], "tools": ["records__update_record"]},
            {"id": "report", "description": "Rewrite report.md as resolved", "depends_on": ["draft", "resolve"],
             "tools": ["workspace__write_file"]},
            {"id": "check", "description": "Read report.md and T-1 back", "depends_on": ["report"],
             "tools": ["workspace__read_file", "records__get_record"]},
        ],
        "blocked": None,
    },
    "usage": {"input_tokens": 300, "output_tokens": 90},
}
TASK_ROLES = {
    "planner": [PLAN],
    "actor": [*(step(calls=[call]) for call in SIDE_EFFECTS), step(calls=READS),
              step("report.md and ticket T-1 both say the incident is resolved.")],
    "critic": [CRITIC_PASS],
}
GOAL = "Record the db-2 incident in report.md and ticket T-1, then resolve both"
TERMINAL = frozenset(code.value for code in Terminal)
TOOL_POINTS = ("tool:before_intent", "tool:after_intent", "tool:during_call", "tool:after_call")

KNOWN_BROKEN: dict[str, str] = {}
"""Kill points that fail today for a product bug, with the bug. The harness requires them to still
fail, so the fix is noticed: then delete the entry."""


@dataclass(frozen=True)
class Site:
    """One run's own resources: thread, workspace, records database, servers, policy and script files."""

    thread: str
    home: Path
    """The processes' working directory (the bridge writes the servers' stderr logs under it)."""
    workspace: Path
    records_url: str
    launch: tuple[str, ...] | None
    """The forkserver launcher's command prefix, or None to start every process directly."""

    def command(self, target: str, *args: str) -> list[str]:
        return [*self.launch, target, *args] if self.launch else [*DIRECT[target], *args]


@dataclass(frozen=True)
class Effects:
    """What a run left behind, compared field by field with the uninterrupted run's."""

    status: str
    answer_sha256: str | None
    files: dict[str, str]
    records: list[tuple[str, str, Any, int]]
    """(collection, id, data, version) of every record."""
    record_keys: int
    """Idempotency keys the records server stored: one per keyed write, however often it was sent."""
    ledger: list[tuple[str, str, str, str]]
    """(call_id, server, tool, status) of every ledger row of the run."""


def _env(crash_at: str | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL", "BOUNDLOOP_CRASH"))}
    if crash_at:
        # Delay 0: the kill lands on the event loop's next turn after the send, before any reply is read.
        env.update(BOUNDLOOP_CRASH_AT=crash_at, BOUNDLOOP_CRASH_DELAY_S="0")
    return env


@pytest.fixture
def forkserver() -> Iterator[tuple[str, ...]]:
    """A forkserver for this test; yields the launcher prefix that starts a process through it."""
    with tempfile.TemporaryDirectory(prefix="bl-fork-") as directory:  # short: a socket path has ~100 bytes
        socket_path = str(Path(directory) / "fork.sock")
        server = subprocess.Popen([sys.executable, "-m", "tests.ledger.forkserver", socket_path], cwd=REPO, env=_env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        try:
            with selectors.DefaultSelector() as ready:
                ready.register(server.stdout, selectors.EVENT_READ)
                assert ready.select(timeout=PROCESS_TIMEOUT_S), "the forkserver did not start"
            assert server.stdout.readline() == "ready\n", "the forkserver failed to start"
            yield (sys.executable, "-S", str(LAUNCH), socket_path)
        finally:
            server.kill()
            server.wait(timeout=PROCESS_TIMEOUT_S)
            server.stdout.close()


@pytest.fixture
def new_site(pg_admin_url: str, tmp_path: Path) -> Iterator[Callable[..., Site]]:
    """`new_site(name, roles=..., launch=...)`: a thread with its own workspace, records database and
    files; its servers are `workspace`, `records` and `probe`."""
    created: list[str] = []

    def make(name: str, *, roles: dict[str, Any] = TASK_ROLES, launch: tuple[str, ...] | None = None) -> Site:
        database = f"r_{uuid.uuid4().hex}"
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {database}")
        created.append(database)
        home = tmp_path / name
        records_url = urlunsplit(urlsplit(pg_admin_url)._replace(path=f"/{database}"))
        site = Site(f"{name}-{uuid.uuid4().hex[:6]}", home, home / "workspace", records_url, launch)
        site.workspace.mkdir(parents=True)
        commands = {
            "workspace": site.command("workspace", "--root", str(site.workspace), "--journal-dir", str(home / "journal")),
            "records": site.command("records", "--database-url", records_url),
            "probe": site.command("probe"),
        }
        servers = {name: {"command": argv[0], "args": argv[1:], "trusted": True} for name, argv in commands.items()}
        servers["workspace"]["root"] = str(site.workspace)  # started through a launcher, its --root is not visible as ours
        (home / "servers.json").write_text(json.dumps({"mcpServers": servers}))
        (home / "policy.json").write_text(json.dumps(POLICY))
        (home / "script.json").write_text(json.dumps({"model_id": "scripted-kill-harness", "roles": roles}))
        return site

    yield make
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        for database in created:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _boundloop(site: Site, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*site.command("boundloop"), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT_S, env=_env(crash_at), cwd=site.home)


def _start(site: Site, db_url: str, *, crash_at: str | None = None, goal: str = GOAL) -> subprocess.CompletedProcess[str]:
    """Run the task; with `crash_at`, the process is expected to die by SIGKILL at that point. The
    scripts have every role, and every role's phase is a kill point: the run asks for all of them."""
    files = {option: str(site.home / name) for option, name in
             (("--script", "script.json"), ("--servers", "servers.json"), ("--policy", "policy.json"))}
    return _boundloop(site, "run", goal, "--model", "scripted", *(part for pair in files.items() for part in pair),
                      "--budget", "side_effects=10", "--planning", "always", "--critique", "always", "--target", "collection:tickets",
                      "--thread", site.thread, "--json", "--database-url", db_url, crash_at=crash_at)


def _resume(site: Site, db_url: str) -> subprocess.CompletedProcess[str]:
    return _boundloop(site, "resume", site.thread, "--json", "--database-url", db_url)


def _resume_to_the_end(site: Site, db_url: str) -> tuple[dict[str, Any] | None, list[str]]:
    """Resume until the run reports a terminal status (at most MAX_RESUMES): the last report, and how each resume exited."""
    report, exits = None, []
    for _ in range(MAX_RESUMES):
        resumed = _resume(site, db_url)
        exits.append(f"resume exit {resumed.returncode}: {resumed.stderr.strip()[-600:]}")
        if resumed.returncode == 0:
            report = json.loads(resumed.stdout)
            if report["status"] in TERMINAL:
                break
    return report, exits


def _effects(site: Site, db_url: str, report: dict[str, Any] | None) -> Effects:
    files = {path.relative_to(site.workspace).as_posix(): path.read_text()
             for path in sorted(site.workspace.rglob("*")) if path.is_file()}
    with psycopg.connect(site.records_url, autocommit=True) as records:
        try:
            rows = records.execute("SELECT collection, id, data, version FROM records ORDER BY collection, id").fetchall()
            keys = records.execute("SELECT count(*) FROM record_idempotency").fetchone()[0]
        except psycopg.errors.UndefinedTable:  # the records server never started
            rows, keys = [], 0
    with psycopg.connect(db_url, autocommit=True) as run_db:
        ledger = run_db.execute("SELECT call_id, server, tool, status FROM boundloop_ledger WHERE thread_id = %s ORDER BY call_id",
                                (site.thread,)).fetchall()
    result = (report or {}).get("result") or {}
    return Effects((report or {}).get("status", "no report"), result.get("sha256"), files,
                   [tuple(row) for row in rows], keys, [tuple(row) for row in ledger])


def _kill_points(site: Site, db_url: str, side_effects: int) -> list[str]:
    """Every node boundary the run passed, from its trace (entering and leaving each occurrence of
    each phase node), and every tool point of every side-effecting call."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        nodes = [row[0] for row in conn.execute("SELECT node FROM boundloop_trace WHERE thread_id = %s AND kind = 'node' ORDER BY id", (site.thread,))]
    seen: Counter[str] = Counter()
    points = []
    for node in nodes:
        seen[node] += 1
        if node != "intake":  # intake has no enter point: nothing of the run happens before it
            points.append(f"enter:{node}#{seen[node]}")
        points.append(f"leave:{node}#{seen[node]}")
    return points + [f"{point}#{call}" for call in range(1, side_effects + 1) for point in TOOL_POINTS]


def _kill_and_resume(point: str, site: Site, db_url: str, baseline: Effects) -> str | None:
    """None when the run died at `point` and resumed to the baseline; otherwise what went wrong."""
    killed = _start(site, db_url, crash_at=point)
    if killed.returncode != -9:
        how = "never reached" if killed.returncode == 0 else f"exit {killed.returncode}: {killed.stderr.strip()[-600:]}"
        return f"{point}: not killed ({how})"
    report, exits = _resume_to_the_end(site, db_url)
    effects = _effects(site, db_url, report)
    differences = {field.name: {"got": getattr(effects, field.name), "baseline": getattr(baseline, field.name)}
                   for field in fields(Effects) if getattr(effects, field.name) != getattr(baseline, field.name)}
    return f"{point}: differs from the baseline: {differences}; {exits}" if differences else None


def test_every_kill_point_resumes_to_the_uninterrupted_result_with_each_side_effect_once(db_url, new_site, forkserver):
    """SIGKILL at each node boundary and each ledger step of each write, then `boundloop resume`:
    the files, the records with their versions and the ledger equal the uninterrupted run's."""
    started = time.monotonic()
    baseline_site = new_site("baseline")
    straight = _start(baseline_site, db_url)
    assert straight.returncode == 0, straight.stderr
    baseline = _effects(baseline_site, db_url, json.loads(straight.stdout))
    assert baseline.status == Terminal.SUCCESS
    assert baseline.files == {"report.md": SIDE_EFFECTS[3]["args"]["content"]}
    assert baseline.records == [("tickets", "T-1", {"title": "disk full on db-2", "status": "resolved", "owner": "ana",
                                                     "resolution": "rotated the logs"}, 2)]
    assert [(f"{server}__{tool}", status) for _, server, tool, status in baseline.ledger] == [
        (call["name"], "COMPLETE") for call in SIDE_EFFECTS]

    points = _kill_points(baseline_site, db_url, len(SIDE_EFFECTS))
    sites = [new_site(f"k{index}", launch=forkserver) for index in range(len(points))]
    with ThreadPoolExecutor(PARALLEL_KILL_POINTS) as pool:
        outcomes = dict(zip(points, pool.map(lambda point, site: _kill_and_resume(point, site, db_url, baseline), points, sites)))

    failures = [failure for point, failure in outcomes.items() if failure is not None and point not in KNOWN_BROKEN]
    fixed = [point for point in KNOWN_BROKEN if point in outcomes and outcomes[point] is None]
    resumed = sum(failure is None for failure in outcomes.values())
    not_resumed = [point + (" (known broken)" if point in KNOWN_BROKEN else "") for point, failure in outcomes.items() if failure]
    print(f"\nkill harness: {len(points)} kill points, {resumed} resumed to the baseline; "
          f"not resumed: {', '.join(not_resumed) or 'none'} [{time.monotonic() - started:.0f}s]")
    assert not failures, "\n".join(failures)
    assert not fixed, f"now resume to the baseline; delete them from KNOWN_BROKEN: {fixed}"
    assert len(points) >= MIN_KILL_POINTS


def _one_call_roles(call: dict[str, Any], description: str) -> dict[str, Any]:
    plan = {"content": {"steps": [{"id": "s1", "description": description, "tools": [call["name"]]}], "blocked": None},
            "usage": {"input_tokens": 100, "output_tokens": 20}}
    return {"planner": [plan], "actor": [step(calls=[call]), step("done")], "critic": [CRITIC_PASS]}


def _ledger(site: Site, db_url: str) -> list[tuple[str, str, str, Any]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [tuple(row) for row in conn.execute(
            "SELECT call_id, tool, status, result FROM boundloop_ledger WHERE thread_id = %s ORDER BY call_id", (site.thread,))]


def test_a_non_idempotent_call_killed_after_its_intent_is_not_sent_again_and_goes_to_review(db_url, new_site):
    """write_note (destructive, not idempotent, no idempotency_key) killed between INTENT and the send:
    the resumed run reports it unknown_after_crash and ends REVIEW_REQUIRED; the ledger row stays INTENT."""
    write_note = {"name": "probe__write_note", "args": {"note": "rotate the db-2 logs"}}
    site = new_site("note", roles=_one_call_roles(write_note, "Write the note"))

    killed = _start(site, db_url, crash_at="tool:after_intent", goal="Write the note")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(site, db_url)

    assert resumed.returncode == Exit.WAITING, resumed.stderr  # it waits for a human's review
    report = json.loads(resumed.stdout)
    assert report["status"] == Terminal.REVIEW_REQUIRED
    assert report["ending"]["reason"].startswith("outcome unknown after a crash: probe__write_note (a0.0, ledger key bl-")
    assert _ledger(site, db_url) == [("a0.0", "write_note", "INTENT", None)]


def test_a_non_idempotent_edit_killed_after_it_ran_is_applied_once_and_goes_to_review(db_url, new_site):
    """edit_file (not idempotent, no idempotency_key) killed after the server applied it but before
    COMPLETE: the resume does not send it again, so the edit shows once, and the run ends REVIEW_REQUIRED."""
    edit = {"name": "workspace__edit_file", "args": {"path": "ticket.md", "old": "open", "new": "open, escalated"}}
    site = new_site("edit", roles=_one_call_roles(edit, "Escalate the ticket"))
    (site.workspace / "ticket.md").write_text("status: open\n")

    killed = _start(site, db_url, crash_at="tool:after_call", goal="Escalate the ticket")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(site, db_url)

    assert resumed.returncode == Exit.WAITING, resumed.stderr  # it waits for a human's review
    assert json.loads(resumed.stdout)["status"] == Terminal.REVIEW_REQUIRED
    assert (site.workspace / "ticket.md").read_text() == "status: open, escalated\n"
    assert _ledger(site, db_url) == [("a0.0", "edit_file", "INTENT", None)]
