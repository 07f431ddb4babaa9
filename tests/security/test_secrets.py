"""Secrets never reach the checkpoint, the trace, `show --json`, the logs or the model by accident.

A run through the real `boundloop` command, with a servers file whose stdio server carries secrets
in `env` (a literal one and a `${VAR}` one), an HTTP server whose `headers` carry one, and an API
key in the config; its tools hand those secrets back. Then every byte the run left behind is searched.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from pydantic import ValidationError

from boundloop.graph.run.runner import Runner
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task
from tests.graph.conftest import CRITIC_PASS, step
from tests.security.attacks import Attacks

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
SHIFTY = str(Path(__file__).parent / "shifty_server.py")
PLAN = {"content": {"steps": [{"id": "s1", "description": "read the values", "tools": ["local__env_value"]}], "blocked": None},
        "usage": {"input_tokens": 100, "output_tokens": 20}}


def secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The shifty server over streamable HTTP; its URL."""
    process = subprocess.Popen([sys.executable, SHIFTY, "--http"], stdout=subprocess.PIPE, stderr=(tmp_path / "http.log").open("w"), text=True)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20.0)
        assert ready, "the HTTP server printed no URL within 20 s"
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(timeout=10)


def leaks(db_url: str, secrets: list[str]) -> list[str]:
    """Every (table, secret) where a secret appears in any column of any row, raw bytes included."""
    found = []
    with psycopg.connect(db_url) as conn:
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        assert {"checkpoint_blobs", "checkpoint_writes", "checkpoints", "boundloop_trace", "boundloop_runs"} <= set(tables)
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                blob = b"".join(value if isinstance(value, bytes) else str(value).encode() for value in row)
                found += [f"{table}: {value}" for value in secrets if value.encode() in blob]
    return found


async def test_a_run_leaves_no_secret_in_checkpoints_trace_show_logs_or_model_input(db_url, tmp_path, http_server, attacks: Attacks):
    literal_env, referenced_env, header, api_key = secret("envsecret"), secret("refsecret"), secret("hdrsecret"), secret("sk")
    servers = {"mcpServers": {
        "local": {"command": sys.executable, "args": [SHIFTY], "trusted": True,
                  "env": {"LITERAL_SECRET": literal_env, "REFERENCED_SECRET": "${SHIFTY_TOKEN}"}},
        "web": {"url": http_server, "headers": {"Authorization": f"Bearer {header}"}, "trusted": True},
    }}
    reads = [{"name": "local__env_value", "args": {"name": "LITERAL_SECRET"}}, {"name": "local__env_value", "args": {"name": "REFERENCED_SECRET"}},
             {"name": "web__echo_header", "args": {"name": "authorization"}}]
    script = {"model_id": "scripted-secrets", "roles": {"planner": [PLAN], "actor": [step(calls=reads), step("values read")], "critic": [CRITIC_PASS]}}
    for name, content in {"servers.json": servers, "script.json": script, "config.json": {"api_key": api_key}}.items():
        (tmp_path / name).write_text(json.dumps(content))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL"))}
    env["SHIFTY_TOKEN"] = referenced_env  # what the servers file's ${SHIFTY_TOKEN} names, exported as a user would
    env["BOUNDLOOP_HOME"] = str(tmp_path / "home")  # where the servers' stderr logs go

    def boundloop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BOUNDLOOP, *args, "--json", "--database-url", db_url], capture_output=True, text=True, timeout=180,
                              env=env, cwd=tmp_path)

    run = boundloop("run", "read the values", "--model", "scripted", "--script", "script.json", "--servers", "servers.json",
                    "--config", "config.json", "--thread", "secrets")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == Terminal.SUCCESS
    shown = boundloop("show", "secrets")
    assert shown.returncode == 0, shown.stderr

    # The tools did hand the secrets back; what reached the model and the observations was masked.
    async with Runner(db_url) as runner:
        values = (await runner.report("secrets")).values
    excerpts = [obs["excerpt"] for obs in values["observations"]]

    everything = [literal_env, referenced_env, header, api_key]
    stored = leaks(db_url, everything)
    outputs = {"run": run.stdout + run.stderr, "show --json": shown.stdout + shown.stderr}
    outputs |= {str(log): log.read_text(errors="replace") for log in (tmp_path / "home" / "logs").rglob("*") if log.is_file()}
    shown_anywhere = [(name, value) for name, text in outputs.items() for value in everything if value in text]
    attacks.record("secret-leak", attempts=len(excerpts) + len(everything) * (1 + len(outputs)),
                   escapes=sum(excerpt != "***" for excerpt in excerpts) + len(stored) + len(shown_anywhere))
    assert excerpts == ["***", "***", "***"]
    assert stored == []
    assert len(outputs) > 2, "the servers' stderr logs were expected under $BOUNDLOOP_HOME/logs"
    assert shown_anywhere == []


async def test_a_server_that_quotes_its_secret_as_it_fails_to_start_has_it_masked_in_the_ending(db_url, tmp_path, monkeypatch, attacks: Attacks):
    """A `${VAR}` reference in inline settings is resolved at start; the failing server's stderr is masked."""
    token = secret("starttoken")
    monkeypatch.setenv("SHIFTY_TOKEN", token)
    servers = {"mcpServers": {"local": {"command": sys.executable, "args": [SHIFTY, "--fail-printing", "API_TOKEN"],
                                        "env": {"API_TOKEN": "${SHIFTY_TOKEN}"}}}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"roles": {}}))
    async with Runner(db_url) as runner:
        report = await runner.start(Task(goal="anything"), RunSettings(model="scripted", script=str(script), servers=servers), thread_id="fails")
    stored = leaks(db_url, [token])
    attacks.record("secret-leak", attempts=2, escapes=(token in report.values["ending"]["reason"]) + len(stored))
    assert report.status == Terminal.UNAVAILABLE_DEP
    assert "shifty_server: bad credentials ***" in report.values["ending"]["reason"]
    assert report.values["settings"]["servers"]["mcpServers"]["local"]["env"] == {"API_TOKEN": "${SHIFTY_TOKEN}"}
    assert stored == []


@pytest.mark.parametrize("where", ["env", "headers"])
def test_inline_settings_with_a_literal_secret_are_refused_before_anything_is_stored(where, tmp_path, attacks: Attacks):
    entry = {"command": "server", "env": {"TOKEN": "hunter2-literal"}} if where == "env" else {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer hunter2-literal"}}
    with pytest.raises(ValidationError) as refused:
        RunSettings(servers={"mcpServers": {"x": entry}})
    message = str(refused.value)
    attacks.record("secret-leak", attempts=1, escapes="hunter2" in message)
    assert f"mcpServers.x.{where}." in message and "is a literal value" in message and "${TOKEN}" in message
    assert "hunter2" not in message


def test_the_cli_refuses_a_config_with_inline_literal_secrets_in_one_line(db_url, tmp_path, attacks: Attacks):
    (tmp_path / "config.json").write_text(json.dumps({"servers": {"mcpServers": {"x": {"command": "server", "env": {"TOKEN": "hunter2-literal"}}}}}))
    (tmp_path / "script.json").write_text(json.dumps({"roles": {}}))
    result = subprocess.run([BOUNDLOOP, "run", "x", "--model", "scripted", "--script", "script.json", "--config", "config.json",
                             "--database-url", db_url], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    attacks.record("secret-leak", attempts=1, escapes="hunter2" in result.stdout + result.stderr)
    assert result.returncode == 2
    assert "mcpServers.x.env.TOKEN is a literal value" in result.stderr and "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


def test_redaction_masks_secret_keys_and_long_values_and_leaves_references_and_ordinary_text():
    from boundloop.tools.secrets import Redactor, redact_keys

    config = {"mcpServers": {"web": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer abcdefgh1", "X-Ref": "${WEB_TOKEN}"}},
                             "local": {"command": "c", "env": {"TZ": "UTC"}, "api_key": "k" * 20, "max_tokens": 5}}}
    masked = redact_keys(config)["mcpServers"]
    assert masked["web"]["headers"] == {"Authorization": "***", "X-Ref": "${WEB_TOKEN}"}
    assert masked["local"] == {"command": "c", "env": {"TZ": "***"}, "api_key": "***", "max_tokens": 5}
    redactor = Redactor(["UTC", "abcdefgh1", "abcdefgh"])
    assert redactor.text("UTC: abcdefgh1 then abcdefgh") == "UTC: *** then ***"  # the longer value first; short ones left
    assert redactor.value({"abcdefgh": ["x abcdefgh1", 3, None]}) == {"***": ["x ***", 3, None]}
    assert Redactor([]).text("abcdefgh1") == "abcdefgh1"


def test_the_environment_is_scanned_once_while_it_is_unchanged_and_again_as_soon_as_it_changes(monkeypatch):
    """Every trace event is redacted with the environment's secrets: the environment is scanned
    when it changed since the last scan, not at every event, and a change is seen at once."""
    from boundloop.tools import secrets as module

    scans: list[int] = []
    original = module._scan
    monkeypatch.setattr(module, "_scan", lambda environ: scans.append(1) or original(environ))
    first, second = secret("envtoken"), secret("envtoken")
    monkeypatch.setenv("BOUNDLOOP_TEST_TOKEN", first)
    for _ in range(20):
        assert module.redact({"text": f"sent {first}"}) == {"text": "sent ***"}
    assert first in module.environment_secrets()
    assert len(scans) == 1
    monkeypatch.setenv("BOUNDLOOP_TEST_TOKEN", second)
    assert module.redact([first, second]) == [first, "***"]  # the old value is no longer a secret
    monkeypatch.delenv("BOUNDLOOP_TEST_TOKEN")
    assert module.redact(second) == second and second not in module.environment_secrets()
    assert len(scans) == 3
    assert module.environment_secrets({"X_API_KEY": "given-value-1", "PATH": "/bin"}) == ["given-value-1"]  # a given mapping: scanned as given


def _hosted_file_with_a_literal(tmp_path: Path, token: str) -> Path:
    hosted = tmp_path / "hosted.json"
    hosted.write_text(json.dumps({"hostedTools": {"docs": {"type": "mcp", "server_url": "https://mcp.example.test/mcp",
                                                            "headers": {"Authorization": f"Bearer {token}"}}}}))
    return hosted


def test_the_cli_refuses_a_hosted_tools_file_with_a_literal_secret_in_one_line(db_url, tmp_path, attacks: Attacks):
    """A hosted-tools file is read when the run is set up and its connectors are kept in the run's
    boundary: a literal header there would be checkpointed, so it is refused as inline ones are."""
    token = secret("hostedsecret")
    _hosted_file_with_a_literal(tmp_path, token)
    (tmp_path / "config.json").write_text(json.dumps({"model_apis": {"scripted": "responses"}, "hosted_tools": "hosted.json"}))
    (tmp_path / "script.json").write_text(json.dumps({"roles": {}}))
    result = subprocess.run([BOUNDLOOP, "run", "x", "--model", "scripted", "--script", "script.json", "--config", "config.json",
                             "--database-url", db_url], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    attacks.record("secret-leak", attempts=1, escapes=token in result.stdout + result.stderr)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{tmp_path / 'hosted.json'}: hostedTools.docs.headers.Authorization is a literal value" in lines[0]
    assert "reference to an environment variable" in lines[0] and token not in result.stderr  # refused before any run exists


async def test_a_run_given_a_hosted_tools_file_with_a_literal_secret_ends_refused_and_stores_none(db_url, tmp_path, attacks: Attacks):
    token = secret("hostedsecret")
    hosted = _hosted_file_with_a_literal(tmp_path, token)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"roles": {}}))
    async with Runner(db_url) as runner:
        report = await runner.start(Task(goal="anything"), RunSettings(model="scripted", script=str(script), hosted_tools=str(hosted),
                                                                       workspace_root=str(tmp_path)), thread_id="hosted-literal")
    stored = leaks(db_url, [token])
    attacks.record("secret-leak", attempts=1, escapes=len(stored))
    assert report.status == Terminal.VALIDATION_FAIL
    assert "hostedTools.docs.headers.Authorization is a literal value" in report.values["ending"]["reason"]
    assert stored == []
