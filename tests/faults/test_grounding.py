"""A plan step is done only when a call made for it is verified, and verified means the
post-condition held where the tool allows one. Commit is refused, before any judge, while a
required step is pending or failed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from boundloop.graph.core.plan import PlanReply
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, step

ALLOW_WRITES = {"rules": [{"id": "writes", "action": "allow", "tool": "write_file"}]}
SHORT_WRITE = Path(__file__).parent / "servers" / "short_write.py"


def write(path: str, content: str, server: str = "workspace") -> dict:
    return {"name": f"{server}__write_file", "args": {"path": path, "content": content}}


async def unverified_store_write(run_script: Any, servers: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A run whose one step writes report.md through the `store` server, and cannot commit: its
    report, and the write's observation, `ok` but never verified."""
    steps = [{"id": "s1", "description": "store the report", "tools": ["store__write_file"]}]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=[write("report.md", "all four quarters\\n", "store")]), step("stored"), step("stored")],
         "critic": [CRITIC_PASS]},
        task={"budget": {"repairs": 1}}, policy=ALLOW_WRITES, servers=servers, unattended=True,
    )
    assert report.status == Terminal.VALIDATION_FAIL
    [observation] = report.values["observations"]
    assert (observation["status"], observation["stage"]) == ("ok", "observed")
    return report, observation


async def test_a_failed_write_keeps_its_step_failed_though_another_file_was_written_and_commit_is_refused(run_script, workspace):
    """s1 writes a.md; s2's write of b.md fails (b.md is a directory). The earlier write of another
    file does not make s2 done: the final answer goes back to the actor without a judge call, and
    with no repair left the run ends VALIDATION_FAIL naming s2 — not SUCCESS without b.md."""
    (workspace / "b.md").mkdir()
    steps = [{"id": "s1", "description": "write a.md", "tools": ["workspace__write_file"]},
             {"id": "s2", "description": "write b.md", "tools": ["workspace__write_file"], "depends_on": ["s1"]}]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=[write("a.md", "A\\n")]), step(calls=[write("b.md", "B\\n")]), step("both written"), step("both written")],
         "judge": [step({"passed": True, "failures": []})], "critic": [CRITIC_PASS]},
        task={"acceptance_criteria": ["a.md and b.md exist"], "budget": {"repairs": 1}}, policy=ALLOW_WRITES, unattended=True,
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert [step["status"] for step in report.values["plan"]["steps"]] == ["done", "failed"]
    assert report.values["ending"]["reason"] == (
        "output still fails after 1 repair(s): step s2 (write b.md) is failed: its last call failed: workspace__write_file (a1.0) ended tool_error")
    assert "judge" not in report.values["usage"]["calls_by_role"]
    assert not (workspace / "a.md").exists()  # the failed run's write was rolled back


@pytest.mark.parametrize(("flags", "failure"), [
    ([], "failed: checksum of the written file: sha256 of the file is '"),
    (["--claim-all"], "failed: checksum of the written file, file read back: sha256 of the file read back is '"),
], ids=["reports-what-it-kept", "claims-it-all"])
async def test_a_write_whose_checksum_does_not_match_is_observed_but_never_verified(run_script, workspace, flags, failure):
    """A store whose disk is full keeps half the content and answers ok — reporting the checksum of
    what it kept, or lying with the checksum of what it was sent, which reading the file back
    exposes. Either way the post-condition fails, the observation stays `observed`, the step is
    failed and the run cannot commit."""
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "store": {"command": sys.executable, "args": [str(SHORT_WRITE), "--root", str(workspace), *flags], "trusted": True,
                  "root": str(workspace)},
    }}
    report, observation = await unverified_store_write(run_script, servers)
    assert observation["postcondition"].startswith(failure)
    assert report.values["plan"]["steps"][0]["status"] == "failed"


@pytest.mark.parametrize("promise", [[], ["--ttl-ms", "60000"]], ids=["no-promise", "list-promised-to-stay"])
async def test_a_read_back_tool_its_server_redefined_after_the_write_is_not_run_so_the_lie_stands_unverified(run_script, workspace, promise):
    """The lying store's write also redefines its `read_file` as one that answers with what was
    sent. The read-back is the harness's own call, and it gets the same pin check as the model's:
    the redefined tool never runs, so it cannot cover the lie, and the write is not verified. It is
    checked against a listing asked after the write, even when the trusted store promised its list
    would stay as it was (a read that vouches for a side effect never rests on such a promise)."""
    servers = {"mcpServers": {"store": {"command": sys.executable, "args": [str(SHORT_WRITE), "--root", str(workspace), "--claim-all",
                                                                            "--rug-pull-read", *promise],
                                        "trusted": True, "root": str(workspace)}}}
    _, observation = await unverified_store_write(run_script, servers)
    assert observation["postcondition"].startswith(
        "failed: checksum of the written file, file read back: could not read it back: tool_changed: store__read_file was not run")
    assert not (workspace / "covered").exists()


async def test_a_verified_write_records_the_checked_postcondition_in_the_provenance(run_script, workspace):
    steps = [{"id": "s1", "description": "write a.md", "tools": ["workspace__write_file"], "args": {"path": "a.md"}}]
    report = await run_script(
        {"planner": [step({"steps": steps})], "actor": [step(calls=[write("a.md", "A\\n")]), step("written")], "critic": [CRITIC_PASS]},
        policy=ALLOW_WRITES,
    )
    assert report.status == Terminal.SUCCESS
    [call] = report.result["provenance"]["tool_calls"]
    assert (call["stage"], call["step_id"], call["postcondition"]) == ("verified", "s1", "checksum of the written file, file read back")
    assert report.values["observations"][0]["stage"] == "committed"


def test_the_planner_cannot_hand_over_a_step_already_done():
    """Progress comes only from verified observations; a plan saying `done` is not a plan."""
    with pytest.raises(ValidationError, match="status"):
        PlanReply.model_validate({"steps": [{"id": "s1", "description": "write", "tools": ["workspace__write_file"], "status": "done"}]})
