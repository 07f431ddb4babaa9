"""A sandboxed snippet cannot see what the policy denies, whichever sandbox tool runs it and however
it names the place.

The sandbox servers are started the way a run starts them (`Services.bridge`, real bubblewrap over
stdio), with the coding_assistant profile's own `secrets/**` rule and a user's rules denying
`private/**` and `*.key`. A probe tries to read, list, stat, copy and hard-link each denied file
through '..', absolute paths, a symlink made before the run, symlinks it makes itself and
/proc/self/root, and walks the whole root; it runs as run_python, as run_command and as a failing
test of run_tests (whose failure text the model would read). The gateway admits run_tests in a
subdirectory, and the gateway's decision is not what protects here: the probes are sent straight to
the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from boundloop.graph.core.budget import Budget, empty_usage
from boundloop.graph.services import Services
from boundloop.mcp_servers.sandbox.server import NO_PYTEST
from boundloop.tools import gateway
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.registry import ToolRegistry
from tests.mcp_servers.sandboxes import searchable_root
from tests.security.attacks import Attacks

SECRET = "SECRET-5be0"
DENIED_FILES = ("secrets/key.txt", "secrets/nested/more.txt", "private/data.txt", "config/app.key")
USER_RULES = {"rules": [
    {"id": "no-private", "action": "deny", "paths": ["private/**"]},
    {"id": "no-keys", "action": "deny", "paths": ["*.key"]},
]}

PROBE = r'''
import json, os, shutil, sys
root, denied = sys.argv[1], json.loads(sys.argv[2])
report = {}

def attempt(label, action):
    try:
        report[label] = repr(action())
    except Exception as error:
        report[label] = "refused: " + type(error).__name__

def read(path):
    with open(path, "rb") as file:
        return file.read().decode(errors="replace")

os.makedirs(os.path.join(root, "sub", "made"), exist_ok=True)
for number, rel in enumerate(denied):
    absolute = os.path.join(root, rel)
    parent = os.path.dirname(absolute)
    names = {
        "absolute": absolute,
        "dotdot": os.path.relpath(absolute, os.getcwd()),
        "deep-dotdot": os.path.join(root, "sub", "..", "sub", "..", rel),
        "proc-root": "/proc/self/root" + absolute,
        "proc-cwd": os.path.join("/proc/self/cwd", os.path.relpath(absolute, os.getcwd())),
        "old-link": os.path.join(root, "link_to_secrets", os.path.relpath(absolute, os.path.join(root, "secrets"))),
    }
    for kind, target in (("file-link", absolute), ("dir-link", parent)):
        link = os.path.join(root, "sub", "made", f"{kind}-{number}")
        attempt(f"{rel} make {kind}", lambda: os.symlink(target, link))
        names[kind] = link if kind == "file-link" else os.path.join(link, os.path.basename(absolute))
    for how, path in names.items():
        attempt(f"{rel} read {how}", lambda: read(path))
        attempt(f"{rel} stat {how}", lambda: os.stat(path).st_size)
        attempt(f"{rel} list {how}", lambda: sorted(os.listdir(os.path.dirname(path))))
        copy = os.path.join(root, "sub", "made", f"copy-{number}-{how}")
        attempt(f"{rel} copy {how}", lambda: shutil.copyfile(path, copy))
    attempt(f"{rel} hard-link", lambda: os.link(absolute, os.path.join(root, "sub", "made", f"hard-{number}")))
    attempt(f"{rel} read hard-link", lambda: read(os.path.join(root, "sub", "made", f"hard-{number}")))
for directory, _, files in os.walk(root, followlinks=True):
    for name in files:
        attempt(os.path.join(directory, name), lambda: read(os.path.join(directory, name)))
print(json.dumps(report))
'''

needs_pytest = pytest.mark.skipif(
    subprocess.run(["/usr/bin/python3", "-c", "import pytest"], capture_output=True).returncode != 0,
    reason="no pytest for the system's python3: " + NO_PYTEST,
)


def build(root: Path) -> None:
    for rel in DENIED_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{SECRET} {rel}\n")
    (root / "sub").mkdir(mode=0o777)
    (root / "sub").chmod(0o777)  # the sandbox user writes its copies and links there
    (root / "sub" / "probe.py").write_text(PROBE)
    (root / "sub" / "test_probe.py").write_text(
        "import subprocess, sys\n\n\n"
        "def test_probe():\n"
        f"    ran = subprocess.run([sys.executable, 'probe.py', {str(root)!r}, {json.dumps(json.dumps(DENIED_FILES))}],"
        " capture_output=True, text=True)\n"
        "    assert ran.stdout == '', ran.stdout + ran.stderr\n"
    )
    (root / "link_to_secrets").symlink_to(root / "secrets")


@pytest.fixture
def root() -> AsyncIterator[Path]:
    with searchable_root() as made:
        build(made)
        yield made


@pytest.fixture
async def bridge(root: Path) -> AsyncIterator[MCPBridge]:
    """The run's bridge as Services starts it: a sandbox server on the root, the user's rules."""
    services = Services(database_url="postgresql://unused")
    sandbox = {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.sandbox", "--root", str(root)], "trusted": True}
    settings = {"servers": {"mcpServers": {"sandbox": sandbox}}, "policy": USER_RULES}
    try:
        yield await services.bridge("hiding-run", settings)
    finally:
        await services.close_run("hiding-run")


def leaks(root: Path, text: str) -> list[str]:
    """Where the secret shows: in the text the model would read, or in a file outside the denied places."""
    found = [f"output: {line[:200]}" for line in text.splitlines() if SECRET in line]
    found += [f"file {path.relative_to(root)}" for path in root.rglob("*")
              if path.is_file() and not path.is_symlink() and str(path.relative_to(root)) not in DENIED_FILES
              and SECRET in path.read_text(errors="replace")]
    return found


def probes(structured: Any) -> int:
    """How many probes the report holds; run_tests's report is a failure's text: one."""
    try:
        return len(json.loads(structured["stdout"]))
    except (TypeError, KeyError, ValueError):
        return 1


def probe_args(root: Path) -> list[str]:
    return [str(root), json.dumps(DENIED_FILES)]


async def test_the_gateway_lets_run_tests_into_a_subdirectory(bridge: MCPBridge) -> None:
    """The call of the attack is admitted under the default profile alone: hiding is what must hold."""
    rules = gateway.run_policy({}, "coding_assistant")
    [admission] = await gateway.admit_all(
        [gateway.ProposedCall("a0.0", "t0", "sandbox__run_tests", {"cwd": "sub"})], registry=ToolRegistry(bridge.specs()),
        rules=rules, budget=Budget(tool_calls=None, side_effects=None), usage=empty_usage(), breaker_state={}, now=0.0,
    )
    assert admission.verdict == "admit", admission.message


@pytest.mark.parametrize("tool", ["run_python", "run_command", pytest.param("run_tests", marks=needs_pytest)])
async def test_no_sandbox_tool_sees_a_denied_path(bridge: MCPBridge, root: Path, tool: str, attacks: Attacks) -> None:
    arguments: dict[str, Any] = {
        "run_python": {"code": f"import sys; sys.argv[1:] = {probe_args(root)!r}\n" + PROBE},
        "run_command": {"argv": ["python3", "probe.py", *probe_args(root)], "cwd": "sub"},
        "run_tests": {"cwd": "sub"},
    }[tool]
    outcome = await bridge.call("sandbox", tool, arguments, timeout_s=60)
    harmed = [rel for rel in DENIED_FILES if (root / rel).read_text() != f"{SECRET} {rel}\n"]
    attacks.record("sandbox-hiding", attempts=probes(outcome.structured), escapes=len(leaks(root, outcome.text)) + len(harmed))
    assert outcome.ok, outcome.text
    assert leaks(root, outcome.text) == []
    if tool != "run_tests":
        assert outcome.structured["exit_code"] == 0, outcome.text
        report = json.loads(outcome.structured["stdout"])
        assert report["secrets/key.txt list absolute"] == "[]"  # the masked directory is empty
        assert report["config/app.key stat absolute"] == "0"  # the masked file is /dev/null
        assert sum(value.startswith("refused") for value in report.values()) > 20  # the probe ran every way
    else:
        assert outcome.structured["failed"] == 1 and "refused" in outcome.text  # the probe ran and reported
    assert all((root / rel).read_text() == f"{SECRET} {rel}\n" for rel in DENIED_FILES)  # hidden, not harmed
