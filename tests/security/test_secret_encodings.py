"""Every common encoding of every value a servers file pulls from the environment is masked, under
any variable name, before anything is stored or shown.

A real server over stdio (tests/security/servers/teller.py) hands its environment back in each
encoding; a full run through the real `boundloop` command quotes a configured secret in its final
answer; then the tool results, `run --json`, `show --json` and every row of every table are searched.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from boundloop.graph.core.status import Terminal
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.secrets import Redactor, environment_secrets
from tests.graph.conftest import CRITIC_PASS, step
from tests.security.attacks import Attacks
from tests.security.servers.teller import ENCODINGS
from tests.security.test_secrets import leaks

BOUNDLOOP = str(Path(sys.executable).parent / "boundloop")
TELLER = str(Path(__file__).parent / "servers" / "teller.py")
NAMES = ("AWS_SECRET_ACCESS_KEY", "GITHUB_PAT", "BUILD_LABEL")
"""Variables a servers file references: two credentials not named `*_TOKEN`/`*_API_KEY`, and one named like nothing secret."""


def value(kind: str) -> str:
    """A secret with letters of both cases, digits and characters URL and base64 encodings change."""
    return f"{kind}/Zq+{uuid.uuid4().hex[:12]}=Kx?"


def forms(secret: str) -> dict[str, str]:
    """Every encoding of `secret`, with its joiners removed where it is split (what a reader could rejoin)."""
    return {how: encode(secret) for how, encode in ENCODINGS.items()}


def servers(environ: dict[str, str]) -> dict[str, dict[str, object]]:
    return {"mcpServers": {"teller": {"command": sys.executable, "args": [TELLER], "trusted": True,
                                      "env": {name: f"${{{name}}}" for name in environ}}}}


@pytest.fixture(scope="module")
def environ() -> dict[str, str]:
    return {name: value(name.lower()) for name in NAMES}


@pytest.fixture(scope="module")
async def bridge(environ: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    async with MCPBridge(load_servers(servers(environ), environ=environ), log_dir=tmp_path_factory.mktemp("logs")) as live:
        yield live


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_each_encoding_of_a_configured_secret_is_masked_in_the_tool_result(bridge, environ, name, encoding, attacks: Attacks) -> None:
    outcome = await bridge.call("teller", "tell", {"name": name, "encoding": encoding}, timeout_s=30)
    written = forms(environ[name])[encoding]
    rejoined = outcome.text.replace("\u200b", "").replace("\u2060", "")
    attacks.record("secret-encoding", attempts=1, escapes=written in outcome.text or environ[name] in rejoined)
    assert outcome.ok, outcome.text
    assert outcome.text.startswith(f"{name} ({encoding}): ") and "***" in outcome.text, outcome.text
    assert written not in outcome.text and environ[name] not in outcome.text.replace("\u200b", "").replace("\u2060", "")
    if encoding in ("base64", "base64url-unpadded"):  # left: the characters a secret byte shares with none, and padding
        left = outcome.text.split(": ", 1)[1].replace("***", "")
        assert len(left) <= 4, left


def test_credentials_whose_names_say_so_otherwise_are_found_in_the_environment() -> None:
    found = environment_secrets({"AWS_SECRET_ACCESS_KEY": "aws-value-1", "GITHUB_PAT": "pat-value-1", "DB_PASS": "pass-value-1",
                                 "PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "PWD": "/work/dir", "OLDPWD": "/work/old"})
    assert found == ["aws-value-1", "pat-value-1", "pass-value-1"]


def test_ordinary_text_is_left_alone() -> None:
    redactor = Redactor([value("x"), "abcdefgh"])
    text = "Action items: publish the notes. aGVsbG8gd29ybGQ= 68656c6c6f and abcdefg only, abc defg"
    assert redactor.text(text) == text


async def test_a_secret_in_the_final_answer_is_stored_and_shown_masked(db_url, tmp_path, environ, attacks: Attacks) -> None:
    """The run's answer quotes a configured secret raw and base64-encoded; the process environment
    names none of them as a credential that `show` (another process) could find by itself."""
    label = environ["BUILD_LABEL"]
    answer = f"The label is {label}; encoded {base64.b64encode(label.encode()).decode()}; key {environ['AWS_SECRET_ACCESS_KEY'].upper()}."
    plan = {"content": {"steps": [{"id": "s1", "description": "read the label", "tools": ["teller__tell"]}], "blocked": None},
            "usage": {"input_tokens": 100, "output_tokens": 20}}
    calls = [{"name": "teller__tell", "args": {"name": "BUILD_LABEL", "encoding": "hex"}}]
    script = {"model_id": "scripted-encodings", "roles": {"planner": [plan], "actor": [step(calls=calls), step(answer)], "critic": [CRITIC_PASS]}}
    for name, content in {"servers.json": servers(environ), "script.json": script}.items():
        (tmp_path / name).write_text(json.dumps(content))
    env = {key: item for key, item in os.environ.items() if not key.startswith(("OPENAI_", "BOUNDLOOP_DATABASE", "DATABASE_URL"))}
    env |= environ | {"BOUNDLOOP_HOME": str(tmp_path / "home")}

    def boundloop(*args: str, with_secrets: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BOUNDLOOP, *args, "--json", "--database-url", db_url], capture_output=True, text=True, timeout=180,
                              env=env if with_secrets else {key: item for key, item in env.items() if key not in environ}, cwd=tmp_path)

    run = boundloop("run", "read the label", "--model", "scripted", "--script", "script.json", "--servers", "servers.json", "--thread", "encoded")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == Terminal.SUCCESS
    shown = boundloop("show", "encoded", with_secrets=False)
    assert shown.returncode == 0, shown.stderr
    assert "The label is ***" in shown.stdout

    everything = [form for secret in environ.values() for form in forms(secret).values()]
    stored = leaks(db_url, everything)
    shown_anywhere = [form for form in everything if form in run.stdout + run.stderr + shown.stdout + shown.stderr]
    attacks.record("secret-encoding", attempts=2 * len(everything), escapes=len(stored) + len(shown_anywhere))
    assert stored == []
    with psycopg.connect(db_url) as conn:
        stored = [str(row) for row in conn.execute("SELECT * FROM boundloop_runs WHERE thread_id = 'encoded'")]
    assert stored and "The label is ***" in stored[0]
    assert shown_anywhere == []
