"""A corrupted checkpoint: `show` and `resume` say in one line that the run's checkpoint is unreadable."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, READ_NOTES, step
from tests.graph.test_cli import boundloop

CORRUPTIONS = {
    "blobs": "UPDATE checkpoint_blobs SET blob = '\\xc1c1c1'::bytea WHERE thread_id = %s AND type = 'msgpack'",
    "checkpoint": "UPDATE checkpoints SET checkpoint = '{\"v\": 4, \"channel_values\": 7}'::jsonb WHERE thread_id = %s",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
async def test_show_and_resume_of_a_run_with_a_corrupted_checkpoint_say_so_in_one_line(run_script, db_url, corruption):
    report = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), step("done")], "critic": [CRITIC_PASS]})
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(CORRUPTIONS[corruption], (report.thread_id,)).rowcount > 0
    for command in ("show", "resume"):
        result = await asyncio.to_thread(boundloop, command, report.thread_id, "--database-url", db_url)
        assert result.returncode == 2, result.stdout
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: run {report.thread_id}: its checkpoint is unreadable (")
