"""tools/saga.py: effects of the real workspace and records servers are undone in reverse order,
a replayed rollback changes nothing, and what cannot be undone is reported for a human."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from boundloop.mcp_servers.records.patch import merge_patch
from tests.tools._procs import wait_gone
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.errors import ConfigError
from boundloop.tools.registry import ToolHints, ToolSpec
from boundloop.tools.saga import Effect, compensate, compensation_for, plan_compensations, reversibility

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0

SANDBOX_RUN = ToolSpec(
    server="sandbox",
    name="run_command",
    description="Run a command in the sandbox.",
    input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
    hints=ToolHints(read_only=False, destructive=True, idempotent=True, open_world=False),
    trusted=True,
)
"""Idempotent and destructive, with nothing in its result that says how to undo it."""


@dataclasses.dataclass
class Servers:
    bridge: MCPBridge
    root: Path
    db_url: str
    specs: dict[str, ToolSpec]

    async def run(self, call_id: str, tool: str, arguments: dict[str, Any]) -> Effect:
        """Call `tool` as the loop would (keyed when it takes a key) and return its effect."""
        spec = self.specs[tool]
        key = f"run-1/{call_id}"
        if "idempotency_key" in spec.input_schema["properties"]:
            arguments = {**arguments, "idempotency_key": key}
        outcome = await self.bridge.call(spec.server, spec.name, arguments, timeout_s=TIMEOUT_S)
        assert outcome.ok, outcome.text
        return Effect(call_id=call_id, spec=spec, arguments=arguments, structured=outcome.structured, key=key)

    def files(self) -> dict[str, str]:
        return {p.relative_to(self.root).as_posix(): p.read_text() for p in sorted(self.root.rglob("*")) if p.is_file()}

    def file_stamps(self) -> dict[str, int]:
        return {p.relative_to(self.root).as_posix(): p.stat().st_mtime_ns for p in self.root.rglob("*")}

    def records(self, *, with_version: bool = False) -> list[tuple[Any, ...]]:
        version = ", version" if with_version else ""
        with psycopg.connect(self.db_url) as conn:
            return conn.execute(f"SELECT collection, id, data{version} FROM records ORDER BY 1, 2").fetchall()


@pytest.fixture
async def servers(tmp_path: Path, db_url: str, log_dir: Path) -> AsyncIterator[Servers]:
    """The real workspace and records servers over stdio, trusted, behind one bridge."""
    root = tmp_path / "workspace"
    workspace = ["-m", "boundloop.mcp_servers.workspace", "--root", str(root), "--journal-dir", str(tmp_path / "journal")]
    config = {
        "workspace": {"command": sys.executable, "args": workspace, "cwd": str(REPO), "trusted": True},
        "records": {
            "command": sys.executable,
            "args": ["-m", "boundloop.mcp_servers.records", "--database-url", db_url],
            "cwd": str(REPO),
            "trusted": True,
        },
    }
    bridge = MCPBridge(load_servers({"mcpServers": config}), log_dir=log_dir)
    async with bridge:
        pids = bridge.pids()
        yield Servers(bridge, root, db_url, {spec.qualified_name: spec for spec in bridge.specs()})
    assert all(wait_gone(pid, timeout_s=10.0) for pid in pids.values()), f"servers outlived the bridge: {pids}"


def statuses(report: list[Any]) -> list[tuple[str, str, str]]:
    return [(line["call_id"], line["tool"], line["status"]) for line in report]


async def test_a_rollback_undoes_every_effect_in_reverse_order_and_a_replay_changes_nothing(servers: Servers) -> None:
    """Two file writes (one new, one overwrite), a record create and a record update are undone
    last-first; running the same rollback again writes nothing and reports every step as done."""
    await servers.run("setup-1", "workspace__write_file", {"path": "notes.txt", "content": "old notes\n"})
    await servers.run(
        "setup-2", "records__create_record", {"collection": "orders", "id": "o-1", "data": {"qty": 2, "note": {"by": "ann"}}}
    )
    files_before, records_before = servers.files(), servers.records()

    effects = [
        await servers.run("c1", "workspace__write_file", {"path": "draft.txt", "content": "draft\n"}),
        await servers.run("c2", "workspace__write_file", {"path": "notes.txt", "content": "new notes\n"}),
        await servers.run("c3", "records__create_record", {"collection": "orders", "id": "o-2", "data": {"qty": 5}}),
        await servers.run(
            "c4",
            "records__update_record",
            {"collection": "orders", "id": "o-1", "data": {"qty": 3, "rush": True, "note": {"at": "noon"}}},
        ),
    ]
    assert servers.files() == {"draft.txt": "draft\n", "notes.txt": "new notes\n"}
    assert [row[:2] for row in servers.records()] == [("orders", "o-1"), ("orders", "o-2")]

    report = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert statuses(report) == [
        ("c4", "records__update_record", "ok"),
        ("c3", "records__delete_record", "ok"),
        ("c2", "workspace__write_file", "ok"),
        ("c1", "workspace__delete_file", "ok"),
    ]
    assert (servers.files(), servers.records()) == (files_before, records_before)

    stamps, rows = servers.file_stamps(), servers.records(with_version=True)
    replay = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert (servers.file_stamps(), servers.records(with_version=True)) == (stamps, rows)
    assert [line["status"] for line in replay] == ["ok", "ok", "ok", "already_compensated"]
    assert replay[3]["detail"] == (
        "delete 'draft.txt', created by write_file: already done (path 'draft.txt': No such file or directory)"
    )


async def test_edits_moves_and_deletes_are_undone_too(servers: Servers) -> None:
    """edit_file, move_file, delete_file and delete_record each have a compensation that restores the data."""
    await servers.run("setup-1", "workspace__write_file", {"path": "a.txt", "content": "alpha\n"})
    await servers.run("setup-2", "workspace__write_file", {"path": "b.txt", "content": "beta\n"})
    await servers.run("setup-3", "records__create_record", {"collection": "orders", "id": "o-1", "data": {"qty": 1}})
    files_before, records_before = servers.files(), servers.records()

    effects = [
        await servers.run("c1", "workspace__edit_file", {"path": "a.txt", "old": "alpha", "new": "ALPHA"}),
        await servers.run("c2", "workspace__move_file", {"source": "b.txt", "destination": "sub/b.txt"}),
        await servers.run("c3", "workspace__delete_file", {"path": "a.txt"}),
        await servers.run("c4", "records__delete_record", {"collection": "orders", "id": "o-1"}),
    ]
    assert (servers.files(), servers.records()) == ({"sub/b.txt": "beta\n"}, [])

    report = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert statuses(report) == [
        ("c4", "records__create_record", "ok"),
        ("c3", "workspace__write_file", "ok"),
        ("c2", "workspace__move_file", "ok"),
        ("c1", "workspace__write_file", "ok"),
    ]
    assert (servers.files(), servers.records()) == (files_before, records_before)


def directories(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()}


async def test_a_rollback_removes_the_directories_the_writes_made_and_nothing_else(servers: Servers) -> None:
    """Writes and a move that made parent directories: undone, the directories they made go, the
    ones that existed before stay, and one that now holds a file the run did not create stays with it."""
    await servers.run("setup-1", "workspace__write_file", {"path": "existing/old.txt", "content": "old\n"})
    await servers.run("setup-2", "workspace__write_file", {"path": "notes.txt", "content": "notes\n"})
    (servers.root / "empty-before").mkdir()
    files_before, dirs_before = servers.files(), directories(servers.root)

    effects = [
        await servers.run("c1", "workspace__write_file", {"path": "made/deep/er/a.txt", "content": "a\n"}),
        await servers.run("c2", "workspace__write_file", {"path": "existing/new/b.txt", "content": "b\n"}),
        await servers.run("c3", "workspace__write_file", {"path": "empty-before/c.txt", "content": "c\n"}),
        await servers.run("c4", "workspace__write_file", {"path": "shared/inner/d.txt", "content": "d\n"}),
        await servers.run("c5", "workspace__move_file", {"source": "notes.txt", "destination": "moved/into/notes.txt"}),
        await servers.run("c6", "workspace__write_file", {"path": "made/deep/second.txt", "content": "e\n"}),
    ]
    assert effects[0].structured["created_directories"] == ["made", "made/deep", "made/deep/er"]
    assert effects[1].structured["created_directories"] == ["existing/new"]
    assert effects[2].structured["created_directories"] == []
    assert effects[5].structured["created_directories"] == []
    (servers.root / "shared" / "user.txt").write_text("not the run's\n")  # something else puts a file there

    report = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert [line["status"] for line in report] == ["ok"] * 6
    assert servers.files() == {**files_before, "shared/user.txt": "not the run's\n"}
    assert directories(servers.root) == dirs_before | {"shared"}
    assert report[2]["arguments"] == {"path": "shared/inner/d.txt", "prune": ["shared/inner", "shared"]}

    replay = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)
    assert directories(servers.root) == dirs_before | {"shared"}
    assert "shared/user.txt" in servers.files() and [line["status"] for line in replay][0] == "already_compensated"


async def test_a_directory_emptied_only_by_another_undo_is_still_removed_on_a_repeat(servers: Servers) -> None:
    """A crash between deleting a created file and removing its directories: the repeated undo
    finds the file gone (already done) and still removes the directories."""
    effect = await servers.run("c1", "workspace__write_file", {"path": "p/q/r.txt", "content": "r\n"})
    (servers.root / "p" / "q" / "r.txt").unlink()  # the first undo got this far

    [line] = await compensate(servers.bridge, [effect], timeout_s=TIMEOUT_S)

    assert line["status"] == "already_compensated"
    assert directories(servers.root) == set()


async def test_an_irreversible_effect_is_flagged_for_manual_action_and_the_others_are_still_undone(
    servers: Servers,
) -> None:
    """The sandbox command sits between two undoable writes; it is reported in its place, and never called."""
    effects = [
        await servers.run("c1", "workspace__write_file", {"path": "a.txt", "content": "a\n"}),
        Effect("c2", SANDBOX_RUN, {"command": "make deploy"}, {"exit_code": 0}, "run-1/c2"),
        await servers.run("c3", "records__create_record", {"collection": "orders", "id": "o-1", "data": {}}),
    ]

    report = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert statuses(report) == [
        ("c3", "records__delete_record", "ok"),
        ("c2", "sandbox__run_command", "manual_action_required"),
        ("c1", "workspace__delete_file", "ok"),
    ]
    assert report[1]["arguments"] == {"command": "make deploy"}
    assert report[1]["detail"] == (
        "sandbox__run_command is irreversible: no compensating call is known for it; "
        "undo call c2 by hand (it ran with the arguments shown)."
    )
    assert (servers.files(), servers.records()) == ({}, [])
    assert plan_compensations(effects)[1] == [effects[1]]


async def test_a_failed_compensation_is_reported_and_the_rest_still_run(servers: Servers) -> None:
    """The moved file was deleted behind the saga's back, so moving it back fails; the record is still removed."""
    await servers.run("setup-1", "workspace__write_file", {"path": "a.txt", "content": "a\n"})
    effects = [
        await servers.run("c1", "records__create_record", {"collection": "orders", "id": "o-1", "data": {}}),
        await servers.run("c2", "workspace__move_file", {"source": "a.txt", "destination": "b.txt"}),
    ]
    (servers.root / "b.txt").unlink()

    report = await compensate(servers.bridge, effects, timeout_s=TIMEOUT_S)

    assert statuses(report) == [("c2", "workspace__move_file", "failed"), ("c1", "records__delete_record", "ok")]
    assert report[0]["detail"] == (
        "move 'b.txt' back to 'a.txt' failed (tool_error): Error executing tool move_file: path 'b.txt': "
        "No such file or directory; check the name with list_files. "
        "The effect of call c2 may still be in place; check it and undo it by hand."
    )
    assert servers.records() == []


async def test_reversibility_comes_from_the_override_then_read_only_then_a_known_compensation(
    servers: Servers,
) -> None:
    """Our servers' writes are compensable whatever the server is called; an unknown destructive tool,
    a look-alike without our signature and an untrusted read-only claim are irreversible."""
    specs = servers.specs
    look_alike = ToolSpec(
        server="fs", name="write_file", description="", trusted=True,
        input_schema={"type": "object", "properties": {"path": {}, "content": {}}},
    )
    renamed = dataclasses.replace(specs["records__update_record"], server="crm")
    table = {
        "workspace__read_file": reversibility(specs["workspace__read_file"]),
        "records__query_records": reversibility(specs["records__query_records"]),
        "untrusted workspace__read_file": reversibility(dataclasses.replace(specs["workspace__read_file"], trusted=False)),
        **{name: reversibility(specs[name]) for name in (
            "workspace__write_file", "workspace__edit_file", "workspace__move_file", "workspace__delete_file",
            "records__create_record", "records__update_record", "records__delete_record",
        )},
        "crm__update_record": reversibility(renamed),
        "sandbox__run_command": reversibility(SANDBOX_RUN),
        "fs__write_file": reversibility(look_alike),
    }
    assert table == {
        "workspace__read_file": "pure",
        "records__query_records": "pure",
        "untrusted workspace__read_file": "irreversible",
        "workspace__write_file": "compensable",
        "workspace__edit_file": "compensable",
        "workspace__move_file": "compensable",
        "workspace__delete_file": "compensable",
        "records__create_record": "compensable",
        "records__update_record": "compensable",
        "records__delete_record": "compensable",
        "crm__update_record": "compensable",
        "sandbox__run_command": "irreversible",
        "fs__write_file": "irreversible",
    }
    overrides = {"workspace__write_file": "irreversible", "sandbox__run_command": "reversible"}
    assert reversibility(specs["workspace__write_file"], overrides) == "irreversible"
    assert reversibility(SANDBOX_RUN, overrides) == "reversible"


def test_an_override_outside_the_four_classes_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError) as raised:
        reversibility(SANDBOX_RUN, {"sandbox__run_command": "undoable"})
    assert str(raised.value) == (
        "reversibility override for 'sandbox__run_command' is 'undoable'; "
        "use one of pure, reversible, compensable, irreversible"
    )


UPDATE_RECORD = ToolSpec(
    server="records", name="update_record", description="", trusted=True,
    input_schema={"type": "object", "properties": {"collection": {}, "id": {}, "data": {}, "idempotency_key": {}}},
)


def updated(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    record = {"collection": "orders", "id": "o-1"}
    return {"previous": {**record, "data": before}, "record": {**record, "data": after}}


def test_an_update_is_undone_by_a_merge_patch_of_only_what_changed() -> None:
    """Added keys become null, changed nested objects are patched key by key, untouched keys are left
    alone; applying the patch to the updated data gives back the previous data."""
    before = {"qty": 2, "note": {"by": "ann", "tags": ["a", None]}, "gift": None}
    after = {"qty": 3, "note": {"by": "bob", "at": "noon", "tags": ["a", None]}, "gift": None, "rush": True}

    compensation = compensation_for(UPDATE_RECORD, {}, updated(before, after), "run-1/c4")

    assert compensation is not None
    assert compensation.arguments == {
        "collection": "orders",
        "id": "o-1",
        "data": {"rush": None, "qty": 2, "note": {"at": None, "by": "ann"}},
        "idempotency_key": "comp:run-1/c4",
    }
    assert merge_patch(after, compensation.arguments["data"]) == before


def test_an_update_that_replaced_a_null_cannot_be_undone_and_needs_a_human() -> None:
    """A merge patch removes a key on null, so it cannot write a null back: no compensation is invented."""
    effect = Effect("c4", UPDATE_RECORD, {}, updated({"due": None}, {"due": "friday"}), "run-1/c4")

    assert compensation_for(effect.spec, effect.arguments, effect.structured, effect.key) is None
    assert plan_compensations([effect]) == ([], [effect])
