"""A run started with `--config` holding the model's `api_key` continues with that key when it is
approved, rejected or resumed in another `boundloop` process that has no OPENAI_API_KEY; the
key itself is never stored with the run. Real CLI subprocesses against the local fake
OpenAI-compatible server."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from boundloop.graph.core.status import Exit, Terminal
from tests.graph.fake_openai import FakeOpenAI
from tests.graph.test_cli import boundloop
from tests.security.test_secrets import leaks

KEY = "sk-config-key-0123456789"
ASK_READS = {"rules": [{"id": "ask-reads", "action": "ask", "tool": "read_file"}]}


def _config(tmp_path: Path, fake: FakeOpenAI) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": "gpt-4o-mini", "base_url": fake.base_url, "api_key": KEY}))
    return path


def _start(tmp_path: Path, db_url: str, config: Path, thread: str, *extra: str) -> Any:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    return boundloop("run", "Summarize notes.md", "--config", str(config), "--workspace", str(workspace), "--thread", thread,
                     "--json", "--database-url", db_url, *extra)


def _keyed_since(fake: FakeOpenAI, first: int) -> list[bool]:
    return [headers.get("authorization") == f"Bearer {KEY}" for headers in fake.headers[first:]]


def test_approve_and_reject_continue_the_run_with_its_config_key(db_url, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(ASK_READS))
    with FakeOpenAI() as fake:
        config = _config(tmp_path, fake)
        for thread in ("approved", "rejected"):
            waiting = _start(tmp_path, db_url, config, thread, "--policy", str(policy))
            assert waiting.returncode == Exit.WAITING, waiting.stderr
        [request] = [item["value"] for item in json.loads(waiting.stdout)["interrupts"]]
        common = ["--json", "--database-url", db_url]

        before = len(fake.headers)
        approved = boundloop("approve", "approved", request["call_id"], *common)
        assert "No API key" not in approved.stderr
        assert (json.loads(approved.stdout)["status"], approved.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), approved.stderr
        rejected = boundloop("reject", "rejected", request["call_id"], "--message", "not that file", *common)
        assert "No API key" not in rejected.stderr
        assert json.loads(rejected.stdout)["status"] in Terminal.__members__, rejected.stderr
        keyed = _keyed_since(fake, before)
        assert keyed and all(keyed)
    assert leaks(db_url, [KEY]) == []


def test_a_run_stopped_by_its_provider_resumes_with_its_config_key_as_the_hint_says(db_url, tmp_path):
    with FakeOpenAI(faults={"actor": [{"status": 503}]}) as fake:
        stopped = _start(tmp_path, db_url, _config(tmp_path, fake), "provider-down", "--budget", "retries=0")
        report = json.loads(stopped.stdout)
        assert (report["status"], stopped.returncode) == (Terminal.UNAVAILABLE_DEP, Exit.UNAVAILABLE), stopped.stderr
        [typed] = re.findall(r"`(boundloop resume [^`]+)`", report["ending"]["next_safe_action"])

        before = len(fake.headers)
        resumed = boundloop(*shlex.split(typed)[1:], "--json", "--database-url", db_url)
        assert "No API key" not in resumed.stderr
        assert (json.loads(resumed.stdout)["status"], resumed.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), resumed.stderr
        assert all(_keyed_since(fake, before))
    assert leaks(db_url, [KEY]) == []


def test_a_decision_is_refused_before_it_is_used_when_the_key_file_is_gone(db_url, tmp_path):
    """Nothing is spent: the run still waits, and once the file is back the same decision works."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(ASK_READS))
    common = ["--json", "--database-url", db_url]
    with FakeOpenAI() as fake:
        config = _config(tmp_path, fake)
        waiting = _start(tmp_path, db_url, config, "keyless", "--policy", str(policy))
        [request] = [item["value"] for item in json.loads(waiting.stdout)["interrupts"]]
        config.rename(tmp_path / "moved.json")

        refused = boundloop("approve", "keyless", request["call_id"], *common)
        assert refused.returncode == Exit.BAD_INPUT
        assert [line for line in refused.stderr.splitlines() if line.strip()] == [
            f"error: the run's model key is read from {str(config)!r}, which cannot be read now (FileNotFoundError); "
            "restore that file (an `api_key` in a JSON object) and resume the run"]
        pending = json.loads(boundloop("pending", "keyless", *common).stdout)
        assert [row["call_id"] for row in pending] == [request["call_id"]]

        (tmp_path / "moved.json").rename(config)
        approved = boundloop("approve", "keyless", request["call_id"], *common)
        assert (json.loads(approved.stdout)["status"], approved.returncode) == (Terminal.SUCCESS, Exit.SUCCESS), approved.stderr
