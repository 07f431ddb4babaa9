"""An untrusted server's annotations relax nothing, anywhere: its tools are relied on as
non-idempotent side effects (ledger, write lock, side-effect budget, one call per wave, no re-send
after a crash), whatever they claim, unless the configuration trusts the server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from boundloop.checkpoints import store
from boundloop.graph.core.status import Terminal
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, run_script, runner, step, workspace  # noqa: F401 (fixtures)
from boundloop.tools import dispatch, ledger
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry
from tests.security.attacks import Attacks

READ = {"name": "workspace__read_file", "args": {"path": "notes.md"}}
READ_SOME = {"name": "workspace__read_file", "args": {"path": "notes.md", "max_chars": 10}}


def workspace_server(root: Path, *, trusted: bool) -> dict[str, Any]:
    """Our workspace server, configured as if it were someone else's: its read_file claims readOnlyHint
    and its write_file claims idempotentHint (both true of it, but unverifiable when untrusted)."""
    return {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(root)], "trusted": trusted}


async def test_an_approved_read_only_claim_of_an_untrusted_tool_is_a_side_effect(run_script, runner, workspace, attacks: Attacks) -> None:
    """Both reads ask (untrusted); once approved they take the ledger and the side-effect budget and run one at a time."""
    waiting = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ, READ_SOME]), step("done")], "critic": [CRITIC_PASS]},
        servers={"mcpServers": {"workspace": workspace_server(workspace, trusted=False)}},
    )
    asked = [item for item in waiting.interrupts if item["value"]["rule"] == "default:untrusted" and item["value"]["side_effect"] is True]
    attacks.record("untrusted-annotations", attempts=2, escapes=2 - len(asked))  # each read-only claim would have skipped the human
    assert {item["value"]["rule"] for item in waiting.interrupts} == {"default:untrusted"}
    assert {item["value"]["side_effect"] for item in waiting.interrupts} == {True}
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "approve"} for item in waiting.interrupts})
    assert done.status == Terminal.SUCCESS
    assert done.values["usage"]["side_effects"] == 2
    async with runner.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT call_id, status FROM boundloop_ledger WHERE thread_id = %s ORDER BY call_id", (done.thread_id,))).fetchall()
    assert [(row["call_id"], row["status"]) for row in rows] == [("a0.0", "COMPLETE"), ("a0.1", "COMPLETE")]
    first, second = sorted(done.values["observations"], key=lambda obs: obs["call_id"])
    assert second["started_at"] >= first["ended_at"]  # separate waves, not one parallel read wave


async def test_a_third_untrusted_read_is_refused_by_the_side_effect_budget(run_script, workspace, attacks: Attacks) -> None:
    """coding_assistant allows 2 side effects; an untrusted tool's read-only claim does not exempt it."""
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ, READ_SOME, {**READ_SOME, "args": {"path": "notes.md", "offset": 1}}]),
                                                step("done")], "critic": [CRITIC_PASS]},
        servers={"mcpServers": {"workspace": workspace_server(workspace, trusted=False)}},
        policy={"rules": [{"id": "let-reads-run", "action": "allow", "server": "workspace", "tool": "read_file"}]},
        unattended=True,
    )
    attacks.record("untrusted-annotations", attempts=1, escapes=report.values["observations"][-1]["status"] == "ok")
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert [obs["status"] for obs in report.values["observations"]] == ["ok", "ok", "budget_exceeded"]


async def test_recovery_never_resends_an_unanswered_call_on_an_untrusted_idempotent_claim(pool, tmp_path: Path, attacks: Attacks) -> None:
    """An INTENT without outcome: the trusted server's write is re-sent with its key, the untrusted one's goes to a human."""
    outcomes = {}
    for trusted in (False, True):
        root = tmp_path / f"trusted-{trusted}"
        servers = load_servers({"mcpServers": {"workspace": workspace_server(root, trusted=trusted)}})
        async with MCPBridge(servers, log_dir=tmp_path) as bridge:
            spec = ToolRegistry(bridge.specs()).get("workspace__write_file")  # claims idempotentHint, takes our key
            assert spec is not None
            call = {"call_id": "a0.0", "name": spec.qualified_name, "args": {"path": "out.txt", "content": "once"}, "args_hash": "h"}
            key = ledger.idempotency_key(f"run-{trusted}", None, "a0.0", "h")
            await store.claim_intent(pool, idempotency_key=key, thread_id=f"run-{trusted}", call_id="a0.0", step_id=None,
                                     tool=spec.name, server=spec.server, args_hash="h")  # the crash came right after this

            async def send(arguments: dict[str, Any]) -> Any:
                return await dispatch.call_with_retry(bridge, spec, arguments, timeout_s=30, max_attempts=1)

            outcome = await ledger.run_once(pool, key=key, run_id=f"run-{trusted}", call=call, spec=spec, step_id=None, send=send)
        outcomes[trusted] = (outcome.status, (root / "out.txt").exists())
    attacks.record("untrusted-annotations", attempts=1, escapes=outcomes[False][1])
    assert outcomes == {False: ("unknown_after_crash", False), True: ("ok", True)}


async def test_trust_granted_by_the_policy_is_relied_on_like_trust_from_the_config(run_script, workspace) -> None:
    """`trusted_servers` in the policy makes the read-only claim count: reads run without approval, outside the ledger."""
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ, READ_SOME]), step("done")], "critic": [CRITIC_PASS]},
        servers={"mcpServers": {"workspace": workspace_server(workspace, trusted=False)}},
        policy={"trusted_servers": ["workspace"]}, unattended=True,
    )
    assert report.status == Terminal.SUCCESS
    assert report.values["usage"].get("side_effects", 0) == 0
    assert [obs["status"] for obs in report.values["observations"]] == ["ok", "ok"]
