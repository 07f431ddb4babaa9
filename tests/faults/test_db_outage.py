"""PostgreSQL restarted, or stopped for good, in the middle of a run driven by the real CLI.

The test owns its cluster (a throwaway one), so it can restart and stop it. A restart is ridden
out: the run continues from its last checkpoint and succeeds, its write done once. A database
that stays away ends the CLI with one line and exit 2, the registry does not claim the run is
running, and once the database is back the run resumes to the same result.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from boundloop.checkpoints import LocalCluster
from boundloop.graph.core.status import Terminal
from tests.graph.test_cli import BOUNDLOOP, _crash_task, _env, _run_args, _wait_for_node, boundloop


@pytest.fixture
def own_cluster(throwaway_cluster) -> Iterator[tuple[LocalCluster, str]]:
    with throwaway_cluster() as cluster:
        yield cluster, cluster.ensure_running()


def _start(tmp_path: Path, name: str, url: str, **env: str) -> tuple[Path, subprocess.Popen[str]]:
    workspace, servers, script = _crash_task(tmp_path, name, slow_s=6)
    process = subprocess.Popen([BOUNDLOOP, *_run_args(servers, script, name, url)], env=_env(**env), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_node(url, name, "act", count=2, process=process, within_s=120)  # the slow call is running
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return workspace, process


def _ledger(url: str, thread: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT tool, status FROM boundloop_ledger WHERE thread_id = %s ORDER BY created_at", (thread,)).fetchall()


def test_a_database_restart_mid_run_is_ridden_out_and_the_run_succeeds(own_cluster, tmp_path):
    cluster, url = own_cluster
    workspace, process = _start(tmp_path, "restarted", url)
    cluster.stop()
    cluster.ensure_running()
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert json.loads(out)["status"] == Terminal.SUCCESS
    assert (workspace / "out.md").read_text() == "result v1\n"
    assert _ledger(url, "restarted") == [("write_file", "COMPLETE")]
    listed = {row["thread_id"]: row for row in json.loads(boundloop("runs", "--json", "--database-url", url).stdout)}
    assert listed["restarted"]["status"] == Terminal.SUCCESS
    resumed = boundloop("resume", "restarted", "--json", "--database-url", url)
    assert json.loads(resumed.stdout)["status"] == Terminal.SUCCESS


def test_a_database_that_stays_away_ends_the_cli_with_one_line_and_the_run_resumes_later(own_cluster, tmp_path):
    cluster, url = own_cluster
    workspace, process = _start(tmp_path, "outage", url, BOUNDLOOP_DB_OUTAGE_S="3")
    cluster.stop()
    out, err = process.communicate(timeout=180)
    assert process.returncode == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: database connection lost (")
    assert lines[0].endswith("; the run keeps its checkpoint: boundloop resume outage")

    cluster.ensure_running()
    listed = {row["thread_id"]: row for row in json.loads(boundloop("runs", "--json", "--database-url", url).stdout)}
    assert listed["outage"]["status"] == "stopped" and listed["outage"]["error"]
    resumed = boundloop("resume", "outage", "--json", "--database-url", url)
    assert json.loads(resumed.stdout)["status"] == Terminal.SUCCESS, resumed.stderr
    assert (workspace / "out.md").read_text() == "result v1\n"
    assert _ledger(url, "outage") == [("write_file", "COMPLETE")]
