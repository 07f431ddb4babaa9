"""A run through a third-party server: the official filesystem MCP server from npm (tests/run.sh installs it).

Its `write_file` takes `path` and `content` like our workspace server's, but returns no checksum:
the post-condition written for our server must not judge it, and an independent read through the
server's own `read_text_file` verifies what it wrote instead.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from boundloop.graph.core.status import Terminal
from boundloop.tools import gateway, postconditions
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolHints, ToolSpec
from tests.graph.conftest import CRITIC_PASS, run_script, runner, step, workspace  # noqa: F401 (fixtures)

FILESYSTEM = Path(__file__).parents[1] / ".peers" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"

pytestmark = pytest.mark.skipif(not FILESYSTEM.exists() or shutil.which("node") is None,
                                reason="server-filesystem is not installed (tests/run.sh installs it when npm is available)")

PLAN_WRITE = {"content": {"steps": [{"id": "s1", "description": "write summary.md", "tools": ["filesystem__write_file"]}], "blocked": None}}
ALLOW_WRITES = {"rules": [{"id": "fs-writes", "action": "allow", "server": "filesystem", "tool": "write_file"}]}


def servers(root: Path) -> dict:
    """As the server's own README configures it (the allowed directory as its argument), plus `root`."""
    return {"mcpServers": {"filesystem": {"command": shutil.which("node"), "args": [str(FILESYSTEM), str(root)], "root": str(root), "trusted": True}}}


async def test_a_write_through_the_filesystem_server_is_verified_by_reading_it_back_and_the_run_succeeds(run_script, workspace):
    content = "Action items:\n- Ana: publish the notes\n"
    write = {"name": "filesystem__write_file", "args": {"path": str(workspace / "summary.md"), "content": content}}
    report = await run_script(
        {"planner": [PLAN_WRITE], "actor": [step(calls=[write]), step("summary.md lists Ana's action item.")], "critic": [CRITIC_PASS]},
        servers=servers(workspace), policy=ALLOW_WRITES,
    )
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert (workspace / "summary.md").read_text() == content
    (written,) = [obs for obs in report.values["observations"] if obs.get("tool") == "filesystem__write_file"]
    assert written["stage"] in ("verified", "committed")
    assert written["postcondition"] == "file read back by an independent read"
    assert report.values["plan"]["steps"][0]["status"] == "done"


async def test_its_specs_get_no_checksum_check_and_a_read_back_that_compares_the_content(tmp_path):
    """Against the live server's own tool definitions: our write post-condition does not apply (no
    checksum declared); the independent read passes on the content sent and fails on anything else."""
    async with MCPBridge(load_servers(servers(tmp_path)), log_dir=tmp_path) as bridge:
        specs = {spec.name: spec for spec in bridge.specs()}
        arguments = {"path": str(tmp_path / "a.md"), "content": "sent\n"}
        assert postconditions.verify(specs["write_file"], arguments, {"content": "Successfully wrote"}) == postconditions.NO_CHECK
        read = postconditions.read_back(specs["write_file"], arguments, {"content": "Successfully wrote"}, specs)
        assert read is not None and read.tool == "read_text_file" and read.arguments == {"path": arguments["path"]}
        for on_disk, holds in (("sent\n", True), ("sent", False), ("", False)):
            (tmp_path / "a.md").write_text(on_disk)
            outcome = await bridge.call("filesystem", read.tool, read.arguments, timeout_s=10)
            assert (read.expect(outcome) is None) is holds, (on_disk, read.expect(outcome))
        (tmp_path / "a.md").unlink()
        assert "read_text_file" in specs and read.expect(await bridge.call("filesystem", read.tool, read.arguments, timeout_s=10))


def test_a_reader_that_does_not_claim_read_only_is_never_used_to_vouch():
    """The read-back is a call the harness makes on its own: only a read-only tool may make it."""
    write = ToolSpec("fs", "write_file", "", {"properties": {"path": {}, "content": {}}}, ToolHints(annotated=True), trusted=True)
    reader = ToolSpec("fs", "read_text_file", "", {"properties": {"path": {}}}, ToolHints(read_only=False, annotated=True), trusted=True)
    assert postconditions.read_back(write, {"path": "a", "content": "x"}, None, {"read_text_file": reader}) is None
    untrusted = ToolSpec("fs", "read_text_file", "", {"properties": {"path": {}}}, ToolHints(read_only=True, annotated=True), trusted=False)
    assert postconditions.read_back(write, {"path": "a", "content": "x"}, None, {"read_text_file": untrusted}) is None
    trusted = ToolSpec("fs", "read_text_file", "", {"properties": {"path": {}}}, ToolHints(read_only=True, annotated=True), trusted=True)
    assert postconditions.read_back(write, {"path": "a", "content": "x"}, None, {"read_text_file": trusted}) is not None


async def test_configured_without_a_root_a_refused_read_says_to_declare_one(tmp_path):
    """As the server's README configures it (no `root`): the profile's path rules cannot be checked,
    so the read is refused, and the reason says what to do rather than only which rule fired."""
    config = servers(tmp_path)
    del config["mcpServers"]["filesystem"]["root"]
    async with MCPBridge(load_servers(config), log_dir=tmp_path) as bridge:
        reader = {spec.name: spec for spec in bridge.specs()}["read_text_file"]
    decision = gateway.permission(gateway.run_policy({}, "coding_assistant"), reader, {"path": str(tmp_path / "notes.md")})
    assert decision.action == "deny"
    assert 'declare "root"' in decision.reason and "servers file" in decision.reason
    with_root = {spec.name: spec for spec in [dataclasses.replace(reader, root=str(tmp_path))]}["read_text_file"]
    assert gateway.permission(gateway.run_policy({}, "coding_assistant"), with_root, {"path": str(tmp_path / "notes.md")}).action == "allow"
