"""Path arguments of a server that is not ours, in the shapes other servers use, against the real
gateway and a real third-party-style server over stdio (tests/security/servers/filer.py): every
shape that reaches a denied file is denied, however the path is spelled; the server alone would
hand the file over.

Three entries of the same server: `named` has a root and no declarations (names, `format: uri` and
mentions find the paths), `declared` has a root and JSON pointers in `path_arguments`, `rootless`
has no root (path rules fail closed on every path found by name or format).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from boundloop.graph.core.budget import Budget, empty_usage
from boundloop.tools import gateway
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.errors import ConfigError
from boundloop.tools.registry import ToolRegistry
from tests.security.attacks import Attacks

SECRET = "SECRET-5e0b"
FILER = Path(__file__).parent / "servers" / "filer.py"
USER_RULE = {"id": "no-private", "action": "deny", "paths": ["private/**"], "reason": "private/ is off limits."}
ALLOW_FILER = {"id": "filer-runs", "action": "allow", "server": "*", "tool": "*", "reason": "The filer may run."}
POLICY = {"rules": [USER_RULE, ALLOW_FILER]}
"""The filer's calls are allowed, so only the path rules (the profile's secrets/ and the user's private/) can deny one."""
DECLARED = {"put": ["/spec/location"], "grab": ["/sources/*/loc"], "read_*": ["/options/path", "/files/*/path", "file_name",
            "pathname", "uri"], "apply_edits": ["/edits/*/path"], "fetch": ["q"]}


def make_root(base: Path) -> Path:
    """secrets/ and private/ holding the secret, a symlink `link` → secrets/, and plain files."""
    root = base / "ws"
    for denied in ("secrets", "private"):
        (root / denied).mkdir(parents=True)
        (root / denied / "key.txt").write_text(f"token={SECRET}\n")
    (root / "sub").mkdir()
    (root / "notes.md").write_text("plain notes\n")
    (root / "sub" / "a.md").write_text("plain a\n")
    (root / "link").symlink_to(root / "secrets")
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("filer"))


def entry(served: Path, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FILER), "--root", str(served)], **extra}


@pytest.fixture(scope="module")
async def bridge(root: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPBridge]:
    config = load_servers({"mcpServers": {
        "named": entry(root, root=str(root)),
        "declared": entry(root, root=str(root), path_arguments=DECLARED),
        "rootless": entry(root),
    }})
    async with MCPBridge(config, log_dir=tmp_path_factory.mktemp("logs")) as live:
        yield live


async def admit(bridge: MCPBridge, name: str, args: dict[str, Any]) -> gateway.Admission:
    rules = gateway.run_policy({"policy": POLICY}, "coding_assistant")
    [admission] = await gateway.admit_all(
        [gateway.ProposedCall("a0.0", "t0", name, args)], registry=ToolRegistry(bridge.specs()), rules=rules,
        budget=Budget(tool_calls=None, side_effects=None), usage=empty_usage(), breaker_state={}, now=0.0,
    )
    return admission


SHAPES = {
    # shape → (tool, arguments for the path P)
    "file_name": ("read_named", lambda p: {"file_name": p}),
    "pathname": ("read_pathname", lambda p: {"pathname": p}),
    "uri": ("read_uri", lambda p: {"uri": p}),
    "format-uri-reference": ("read_ref", lambda p: {"ref": p}),
    "options.path": ("read_options", lambda p: {"options": {"path": p}}),
    "files[].path": ("read_many", lambda p: {"files": [{"path": "notes.md"}, {"path": p}]}),
    "edits[].path": ("apply_edits", lambda p: {"edits": [{"path": p, "old": SECRET, "new": "pwned"}]}),
    "spec.location": ("put", lambda p: {"spec": {"location": p, "content": "planted"}}),
    "sources[].loc": ("grab", lambda p: {"sources": [{"loc": p}]}),
    "bare-q": ("fetch", lambda p: {"q": p}),
}
SPELLINGS = {
    # spelling → the path of `denied`/key.txt ({root} is the root)
    "plain": "{denied}/key.txt",
    "dot-slash": "./{denied}/key.txt",
    "dot-dot": "sub/../{denied}/key.txt",
    "absolute": "{root}/{denied}/key.txt",
    "file-uri": "file://{root}/{denied}/key.txt",
    "file-uri-localhost": "file://localhost{root}/{denied}/key.txt",
    "file-uri-encoded": "file://{root}/{denied}/%6Bey.txt",
}
SYMLINKED = "link/key.txt"
"""Only the profile's secrets/ has a link to it."""
URI_ONLY = {"uri", "format-uri-reference"}
"""Shapes whose server reads URIs: a relative path is also a URI reference there."""


def spelled(spelling: str, denied: str, root: Path) -> str:
    return SPELLINGS[spelling].format(denied=denied, root=root)


def corpus(root_known: bool) -> list[tuple[str, str, str]]:
    """(shape, spelling, denied directory) for every shape the servers' reading makes meaningful."""
    cases = [(shape, spelling, denied) for shape in SHAPES for spelling in [*SPELLINGS, "symlink"]
             for denied in ("secrets", "private") if not (spelling == "symlink" and denied == "private")]
    return [case for case in cases if root_known or case[0] != "bare-q"]


def arguments_for(shape: str, spelling: str, denied: str, root: Path) -> tuple[str, dict[str, Any]]:
    tool, make = SHAPES[shape]
    path = SYMLINKED if spelling == "symlink" else spelled(spelling, denied, root)
    return tool, make(path)


@pytest.mark.parametrize("shape", SHAPES)
async def test_the_server_alone_hands_the_secret_over(bridge, root, shape) -> None:
    """Without the gateway's decision each shape leaks: the denials below are real."""
    tool, make = SHAPES[shape]
    outcome = await bridge.call("named", tool, make("sub/../secrets/key.txt" if shape != "spec.location" else "secrets/key.txt"), timeout_s=30)
    assert outcome.ok, outcome.text
    if shape == "spec.location":
        assert (root / "secrets" / "key.txt").read_text() == "planted"
        (root / "secrets" / "key.txt").write_text(f"token={SECRET}\n")
    else:
        assert SECRET in outcome.text


@pytest.mark.parametrize(("shape", "spelling", "denied"), corpus(True), ids=["-".join(case) for case in corpus(True)])
@pytest.mark.parametrize("server", ["named", "declared"])
async def test_every_shape_and_spelling_is_denied_on_a_server_with_a_root(bridge, root, server, shape, spelling, denied, attacks) -> None:
    tool, args = arguments_for(shape, spelling, denied, root)
    admission = await admit(bridge, f"{server}__{tool}", args)
    attacks.record("path-arguments", attempts=1, escapes=admission.verdict != "denied")
    rule = "rule:coding_assistant.secrets" if denied == "secrets" else "rule:no-private"
    assert (admission.verdict, admission.call.get("rule")) == ("denied", rule), admission.message
    assert f"{denied}/key.txt" in admission.message


NAMED_ONLY = [case for case in corpus(False) if case[0] not in ("spec.location", "sources[].loc")]


@pytest.mark.parametrize(("shape", "spelling", "denied"), NAMED_ONLY, ids=["-".join(case) for case in NAMED_ONLY])
async def test_without_a_root_every_path_found_by_name_or_format_fails_closed(bridge, root, shape, spelling, denied, attacks) -> None:
    tool, args = arguments_for(shape, spelling, denied, root)
    admission = await admit(bridge, f"rootless__{tool}", args)
    attacks.record("path-arguments", attempts=1, escapes=admission.verdict != "denied")
    assert admission.verdict == "denied", admission.message


CLEAN = [
    ("read_named", {"file_name": "notes.md"}), ("read_pathname", {"pathname": "sub/a.md"}),
    ("read_options", {"options": {"path": "notes.md", "encoding": "utf-8"}}),
    ("read_many", {"files": [{"path": "notes.md"}, {"path": "sub/a.md"}]}),
    ("grab", {"sources": [{"loc": "notes.md"}]}), ("fetch", {"q": "sub/a.md"}),
    ("read_uri", {"uri": "file://ROOT/notes.md"}), ("read_ref", {"ref": "sub/a.md"}),
    ("fetch", {"q": "what is in secrets"}), ("put", {"spec": {"location": "sub/new.md", "content": "see secrets/key.txt"}}),
]


@pytest.mark.parametrize(("tool", "args"), CLEAN, ids=[f"{tool}:{args}" for tool, args in CLEAN])
@pytest.mark.parametrize("server", ["named", "declared"])
async def test_what_stays_clear_of_denied_paths_runs(bridge, root, server, tool, args) -> None:
    args = {key: value.replace("ROOT", str(root)) if isinstance(value, str) else value for key, value in args.items()}
    admission = await admit(bridge, f"{server}__{tool}", args)
    assert admission.verdict == "admit", admission.message
    outcome = await bridge.call(server, tool, args, timeout_s=30)
    assert SECRET not in outcome.text
    assert outcome.ok or args.get("q") == "what is in secrets", outcome.text  # not a file: the server says so


async def test_a_declared_pointer_reaches_a_path_no_name_or_mention_finds(bridge, root, attacks) -> None:
    """A new file in a new directory under secrets/ exists nowhere yet, and `location`/`loc` are not
    path names: only the declared pointers make those arguments paths."""
    for tool, args in [("put", {"spec": {"location": "secrets/new/deeper/x.txt", "content": "planted"}}),
                       ("grab", {"sources": [{"loc": "notes.md"}, {"loc": "secrets/new/deeper/x.txt"}]})]:
        undeclared = await admit(bridge, f"named__{tool}", args)
        declared = await admit(bridge, f"declared__{tool}", args)
        attacks.record("path-arguments", attempts=1, escapes=declared.verdict != "denied")
        assert (undeclared.verdict, declared.verdict) == ("admit", "denied"), (tool, declared.message)
        assert "secrets/new/deeper/x.txt" in declared.message


def test_a_pointer_that_is_not_one_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_servers({"mcpServers": {"f": entry(Path("/srv"), path_arguments=["options/path"])}})
    assert str(caught.value).count("\n") == 0
    assert "give an argument's name (`path`) or a JSON pointer" in str(caught.value)
