"""Run leases: one driver per run, on one connection per process that never starves the pool,
and an unlock that never hides the error that ended a drive."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from boundloop.checkpoints import LeaseHolder, RunActiveElsewhere
from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step, workspace  # noqa: F401  (fixture)

LEASES = "SELECT pid, objid FROM pg_locks WHERE locktype = 'advisory' AND granted"


@pytest.fixture
async def holders(db_url: str) -> AsyncIterator[tuple[LeaseHolder, LeaseHolder]]:
    """Two processes' lease holders on this test's database."""
    here, there = LeaseHolder(db_url), LeaseHolder(db_url)
    try:
        yield here, there
    finally:
        await here.aclose()
        await there.aclose()


def _backends_holding_leases(db_url: str) -> set[int]:
    with psycopg.connect(db_url) as db:
        return {pid for pid, _ in db.execute(LEASES).fetchall()}


async def test_many_leases_share_one_connection(db_url: str) -> None:
    holder = LeaseHolder(db_url)
    try:
        async with asyncio.TaskGroup() as group:
            held = asyncio.Event()
            release = asyncio.Event()

            async def drive(thread_id: str) -> None:
                async with holder.lease(thread_id):
                    if len(holder.held) == 40:
                        held.set()
                    await release.wait()

            for number in range(40):
                group.create_task(drive(f"run-{number}"))
            await held.wait()
            with psycopg.connect(db_url) as db:
                assert len(db.execute(LEASES).fetchall()) == 40
            assert len(_backends_holding_leases(db_url)) == 1
            release.set()
        assert _backends_holding_leases(db_url) == set()
    finally:
        await holder.aclose()


async def test_a_held_run_is_refused_in_this_process_and_in_another(holders: tuple[LeaseHolder, LeaseHolder]) -> None:
    """A session may take its own advisory lock twice, so the holder also refuses its own runs."""
    here, there = holders
    async with here.lease("shared"):
        for holder in (here, there):
            with pytest.raises(RunActiveElsewhere, match="run shared is active elsewhere"):
                async with holder.lease("shared"):
                    pytest.fail("a second driver got the lease")
    async with there.lease("shared"):
        assert there.held == {"shared"} and here.held == frozenset()


async def test_the_error_that_ended_a_drive_survives_a_dead_lease_session(
    holders: tuple[LeaseHolder, LeaseHolder], db_url: str, pg_admin_url: str
) -> None:
    holder, other = holders
    with pytest.raises(ValueError, match="the drive failed"):
        async with holder.lease("doomed"):
            _terminate_lease_session(db_url, pg_admin_url)
            raise ValueError("the drive failed")
    async with other.lease("doomed"):  # the lock went with the session
        pass
    async with holder.lease("next"):  # and the holder reconnects for the next run
        assert holder.held == {"next"}


async def test_leases_lost_with_their_session_are_taken_again_on_the_next_one(
    holders: tuple[LeaseHolder, LeaseHolder], db_url: str, pg_admin_url: str
) -> None:
    holder, other = holders
    async with holder.lease("first"):
        _terminate_lease_session(db_url, pg_admin_url)
        async with holder.lease("second"):
            with pytest.raises(RunActiveElsewhere):
                async with other.lease("first"):
                    pytest.fail("the run's lease was not taken again")


def _terminate_lease_session(db_url: str, pg_admin_url: str) -> None:
    [backend] = _backends_holding_leases(db_url)
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))


async def test_more_concurrent_runs_than_pool_connections_all_finish(db_url: str, tmp_path: Path, workspace: Path) -> None:
    """The Runner's pool has 10 connections and leases hold none of them, so the runs' own
    checkpoint writes never wait for a connection a lease holds (which would end in PoolTimeout)."""
    script = tmp_path / "script.json"
    roles = {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("done")], "critic": [CRITIC_PASS]}
    script.write_text(json.dumps({"model_id": "scripted-test", "roles": roles}))
    settings = RunSettings(model="scripted", script=str(script), workspace_root=str(workspace))
    async with Runner(db_url) as runner:
        assert runner.pool.max_size == 10
        reports = await asyncio.gather(*(runner.start(Task(goal=f"Summarize notes.md ({n})"), settings) for n in range(14)))
    assert [report.status for report in reports] == [Terminal.SUCCESS] * 14
