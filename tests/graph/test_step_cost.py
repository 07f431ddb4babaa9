"""Work the runtime does at every step, kept off the hot path: the run's registry is built once
per process from its pins, the guard edges run on the event loop, not in a thread pool, trace
events are redacted without scanning an unchanged environment again for each, and no phase
progress record is built when nobody receives it; and work a run does once, kept to what it needs:
the pin copies the tools without a deep copy of every leaf of their schemas, a fresh run is not
updated in the registry before intake registers it, and a run that ended is reported from its
stream, its state not read back."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import threading
from typing import Any

import pytest

from boundloop.checkpoints import store
from boundloop.graph import guards
from boundloop.graph.models import catalog as models
from boundloop.graph.core.errors import RunStopped
from boundloop.graph.run.runner import Runner
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, PLAN_READ_NOTES, step
from boundloop.tools import pinning, secrets

READS = [{"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 100 + n}} for n in range(3)]
SCRIPT = {"planner": [PLAN_READ_NOTES], "actor": [*(step(calls=[call]) for call in READS), step("done")], "critic": [CRITIC_PASS]}


async def test_a_run_builds_its_pinned_registry_once_not_at_every_step(run_script, monkeypatch):
    """Plan, validate, three acts (each with its gate), and executes all read the registry: it is built
    once, from the run's pins (an execute task's Send names them by version, graph/sends.py)."""
    built: list[int] = []
    original = pinning.registry_of

    def counting(pinned: dict[str, Any]) -> Any:
        built.append(len(pinned["specs"]))
        return original(pinned)

    monkeypatch.setattr(pinning, "registry_of", counting)
    report = await run_script(SCRIPT)
    assert report.status == Terminal.SUCCESS
    full = len(report.values["tools"]["specs"])
    assert full > 1
    assert built == [full]


async def test_a_changed_pin_gets_its_own_registry():
    """The cache is keyed by the pin's version: another pin never gets a stale registry."""
    services = Services()
    spec = {"server": "s", "name": "t", "description": "", "input_schema": {}, "hints": {}, "trusted": True}
    first = pinning.pin([pinning.spec_of(spec)])
    second = pinning.pin([pinning.spec_of({**spec, "description": "changed"})])
    one, again = await services.registry("run", {}, first), await services.registry("run", {}, first)
    other = await services.registry("run", {}, second)
    assert one is again and other is not one
    assert other.get("s__t").description == "changed"
    await services.close_run("run")
    assert await services.registry("run", {}, first) is not one  # a closed run's registries are dropped


async def test_every_guard_edge_runs_on_the_event_loop_thread(db_url, workspace, tmp_path, monkeypatch):
    """A plain `def` edge would run in LangGraph's thread pool at every step; ours stay on the loop."""
    threads: set[int] = set()
    for name in [name for name in dir(guards) if name.startswith("route_")]:
        original = getattr(guards, name)

        @functools.wraps(original)  # keeps the Literal return type the graph draws its edges from
        def recording(state: dict[str, Any], _original: Any = original) -> Any:
            threads.add(threading.get_ident())
            return _original(state)

        monkeypatch.setattr(guards, name, recording)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": SCRIPT}))
    async with Runner(db_url) as runner:  # built after the patch: the graph holds the recording guards
        report = await runner.start(Task(goal="Summarize notes.md"), RunSettings(model="scripted", script=str(script), workspace_root=str(workspace)))
    assert report.status == Terminal.SUCCESS
    assert threads == {threading.get_ident()}


async def test_a_run_redacts_its_trace_events_without_scanning_the_environment_again_for_each(run_script, monkeypatch):
    """Every node's trace event (and the registry's result) is redacted with the environment's
    secrets; an environment that did not change is not decoded and matched again for each one."""
    secrets.redact({})  # the environment as it is now has been scanned
    scans: list[int] = []
    original = secrets._scan
    monkeypatch.setattr(secrets, "_scan", lambda environ: scans.append(1) or original(environ))
    report = await run_script(SCRIPT)
    assert report.status == Terminal.SUCCESS
    assert scans == []


async def test_a_fresh_start_leaves_registering_the_run_to_intake_and_a_resume_marks_it_running(runner, workspace, tmp_path, monkeypatch):
    """A run `start` found absent from the registry is registered (as running) by intake, in the
    drive's first step: no UPDATE of a row that is not there before it. A resumed run is in the
    registry (here: stopped), and its drive marks it running first."""
    statuses: list[str] = []
    original = store.set_run_status

    async def recording(pool: Any, thread_id: str, status: str, **kwargs: Any) -> None:
        statuses.append(status)
        await original(pool, thread_id, status, **kwargs)

    monkeypatch.setattr(store, "set_run_status", recording)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": {**SCRIPT, "actor": SCRIPT["actor"][:1]}}))  # the second turn is missing
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace))
    with pytest.raises(RunStopped):
        await runner.start(Task(goal="Summarize notes.md"), settings, thread_id="fresh-then-resumed")
    assert statuses == [store.STOPPED]
    assert (await store.get_run(runner.pool, "fresh-then-resumed")).status == store.STOPPED
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": SCRIPT}))
    models._build.cache_clear()  # the model of a script path is built once per process
    statuses.clear()
    report = await runner.resume("fresh-then-resumed")
    assert report.status == Terminal.SUCCESS
    assert statuses == [store.RUNNING]
    assert (await store.get_run(runner.pool, "fresh-then-resumed")).status == Terminal.SUCCESS


async def test_a_run_that_ends_is_reported_from_its_stream_without_reading_its_state_back(run_script, runner, monkeypatch):
    """The drive saw the state after finalize's step, the one its checkpoint saved: the report is
    that, not a second read of the checkpoint and of every delta write of the thread. A run that
    waits for a human is still reported from its checkpoint (its pending requests with their ids)."""
    reads: list[str] = []
    original = runner.graph.aget_state

    async def counting(config: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(config["configurable"]["thread_id"])
        return await original(config, *args, **kwargs)

    monkeypatch.setattr(runner.graph, "aget_state", counting)
    ended = await run_script(SCRIPT)
    assert ended.status == Terminal.SUCCESS and not ended.waiting
    assert reads == []
    again = await runner.report(ended.thread_id)
    assert (again.status, again.values, again.interrupts) == (ended.status, ended.values, ended.interrupts)
    assert reads == [ended.thread_id]

    move = {"name": "workspace__move_file", "args": {"source": "notes.md", "destination": "a.md"}}
    reads.clear()
    models._build.cache_clear()  # the same script path, another script
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[move]), step("done")], "critic": [CRITIC_PASS]})
    assert waiting.status == Terminal.CONFIRM_REQUIRED and [item["value"]["call_id"] for item in waiting.interrupts]
    assert reads == [waiting.thread_id]
    again = await runner.report(waiting.thread_id)
    assert (again.status, again.values, again.interrupts) == (waiting.status, waiting.values, waiting.interrupts)


def test_pinning_copies_the_tools_without_deep_copying_every_leaf_of_their_schemas(monkeypatch):
    """Intake pins every tool of every server, schemas and all: the pin is `dataclasses.asdict`'s
    copy of each spec, made without a `copy.deepcopy` call for each string and number in it."""
    from boundloop.tools.registry import ToolSpec

    schema = {"type": "object", "properties": {f"arg{n}": {"type": "string", "description": "d" * n, "enum": ["a", "b"], "maxLength": n}
                                               for n in range(20)}, "required": ["arg1"], "additionalProperties": False}
    specs = [ToolSpec(server="s", name=f"t{n}", description="tool", input_schema=schema, trusted=bool(n % 2), root="/r",
                      declared_paths=("path",)) for n in range(5)]
    expected = [{**{key: value for key, value in dataclasses.asdict(spec).items() if key in pinning._SPEC_FIELDS},
                 "hints": dataclasses.asdict(spec.claimed_hints)} for spec in specs]
    copies: list[int] = []
    original = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda value, *args: copies.append(1) or original(value, *args))
    pinned = pinning.pin(specs)
    assert copies == []
    assert [{key: value for key, value in entry.items() if key != "sha256"} for entry in pinned["specs"]] == expected
    assert [list(entry)[:-1] for entry in pinned["specs"]] == [list(entry) for entry in expected]  # the same keys, in the same order
    assert pinned["specs"][0]["input_schema"] is not schema and pinned["specs"][0]["input_schema"]["properties"] is not schema["properties"]
    assert all(pinning.registry_of(pinned).get(spec.qualified_name) == spec for spec in specs)


async def test_phase_progress_is_made_only_when_an_observer_takes_custom_events(runner, workspace, tmp_path, monkeypatch):
    """Each phase's progress record goes to `custom` stream consumers: a drive whose observer takes
    none does not build one at every node (nor ask LangGraph for the `custom` stream); an observer
    with `custom` gets every phase's, in order."""
    from boundloop.graph import builder

    made: list[str] = []
    original = builder.phase_progress
    monkeypatch.setattr(builder, "phase_progress", lambda node, *args: made.append(node) or original(node, *args))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": SCRIPT}))
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace))
    nodes: list[str] = []
    quiet = await runner.start(Task(goal="Summarize notes.md"), settings, observe=lambda node, update, state: nodes.append(node))
    assert quiet.status == Terminal.SUCCESS and len(nodes) > 10
    assert made == []

    class Watching:
        def __init__(self) -> None:
            self.events: list[dict[str, Any]] = []

        def __call__(self, node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
            pass

        def custom(self, event: dict[str, Any]) -> None:
            self.events.append(event)

    watching = Watching()
    shown = await runner.start(Task(goal="Summarize notes.md"), settings, observe=watching)
    assert shown.status == Terminal.SUCCESS
    phases = [event["phase"] for event in watching.events if event.get("kind") == "progress"]
    assert phases == made == [node for node in nodes if node not in ("execute", "approve")]
    assert phases[0] == "intake" and phases[-1] == "finalize"
    assert all(set(event) == {"kind", "phase", "budget", "tools"} for event in watching.events if event.get("kind") == "progress")
