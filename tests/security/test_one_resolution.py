"""Paths whose '..' reads one way by name and another through a symlink, against the real gateway
and the real workspace server over stdio: no call reads or changes a denied path.

`link/..` by name is the directory holding the link; through the link it is the parent of the
link's target. The policy resolves paths through symlinks, the server acts by name: when only one
of them is consulted, `.venv/bin/python/../../../secrets/key.txt` (python → /usr/bin/python3) is
"somewhere in /usr" to one and `secrets/key.txt` to the other. The corpus crosses link kinds, link
depths and '..' placements with every path-taking tool, under the profile's own deny rule and under
a user's `paths` rule. A call the policy asks about is run as if a human approved it: nothing in the
path's text tells the approver where it leads.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from boundloop.graph.core.budget import Budget, empty_usage
from boundloop.tools import gateway
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry
from tests.security.attacks import Attacks

SECRET = "SECRET-c41d"
USER_RULE = {"rules": [{"id": "no-private", "action": "deny", "paths": ["private/**"], "reason": "private/ is off limits."}]}
POLICIES = {"profile-default": ({}, "secrets"), "user-paths-rule": (USER_RULE, "private")}
"""Policy variant → (the user's policy, the denied directory it protects)."""

KINDS = {
    # kind → where the link points ({root} is the workspace root)
    "file-outside": "/usr/bin/python3",
    "dir-outside": "/usr/lib",
    "file-inside": "{root}/sub/deeper/deepest/f.txt",
    "dir-inside": "{root}/sub/deeper/deepest",
    "chained": "{name}-next",  # a link to a link to /usr/share
    "dangling": "/nonexistent/a/b/c",
}
DEPTHS = (1, 2, 3, 4)
PLACEMENTS = {
    # '..' placement → the path to `target` through the link at `link` (`depth` names deep)
    "right-after": lambda link, depth, target: "/".join([link, *[".."] * depth, target]),
    "after-a-name": lambda link, depth, target: "/".join([link, "x", "..", *[".."] * depth, target]),
    "with-noise": lambda link, depth, target: "/".join([link, ".", "", *[".."] * depth, target]).replace("//", "/./"),
}
USES = {
    # path-taking use → (tool, arguments for the file `file` and the directory `folder`)
    "read": ("read_file", lambda file, folder: {"path": file}),
    "search": ("search", lambda file, folder: {"query": "SECRET", "path": folder}),
    "list": ("list_files", lambda file, folder: {"path": folder, "recursive": True}),
    "write": ("write_file", lambda file, folder: {"path": file, "content": "pwned"}),
    "edit": ("edit_file", lambda file, folder: {"path": file, "old": SECRET, "new": "pwned"}),
    "move-source-dir": ("move_file", lambda file, folder: {"source": folder, "destination": "moved-out"}),
    "move-source-file": ("move_file", lambda file, folder: {"source": file, "destination": "moved-out.txt"}),
    "move-destination": ("move_file", lambda file, folder: {"source": "notes.md", "destination": folder + "/planted.md"}),
    "delete": ("delete_file", lambda file, folder: {"path": file}),
}


def link_path(kind: str, depth: int) -> str:
    return "/".join([*[f"d{level}" for level in range(1, depth)], f"{kind}-link"])


CORPUS = [
    (kind, depth, placement, use)
    for kind in KINDS for depth in DEPTHS for placement in PLACEMENTS for use in USES
]


class Workspace:
    """A root with secrets/ and private/ (each holding the secret), and a link of every kind at every depth."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def build(self) -> None:
        root = self.root
        for denied in ("secrets", "private"):
            (root / denied).mkdir(parents=True, exist_ok=True)
            (root / denied / "key.txt").write_text(f"key={SECRET}\n")
        (root / "notes.md").write_text("notes\n")
        (root / "sub" / "deeper" / "deepest").mkdir(parents=True, exist_ok=True)
        (root / "sub" / "deeper" / "deepest" / "f.txt").write_text("inside\n")
        for kind, target in KINDS.items():
            for depth in DEPTHS:
                link = root / link_path(kind, depth)
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.is_symlink():
                    link.symlink_to(target.format(root=root, name=link.name))
                if kind == "chained" and not (nxt := link.with_name(link.name + "-next")).is_symlink():
                    nxt.symlink_to("/usr/share")

    def denied_state(self, denied: str) -> dict[str, tuple[int, str]]:
        """Every name under the denied directory with its inode and content (where it is a file)."""
        base = self.root / denied
        return {str(path.relative_to(self.root)): (path.stat().st_ino, path.read_text() if path.is_file() else "")
                for path in [base, *sorted(base.rglob("*"))] if path.exists()}

    def restore(self, denied: str) -> None:
        """Undo what a call changed: a moved-out tree goes back, moved-out files and planted ones go."""
        moved = self.root / "moved-out"
        if moved.is_dir() and not (self.root / denied).exists():
            moved.rename(self.root / denied)
        for leftover in (moved, self.root / "moved-out.txt", self.root / denied / "planted.md"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
        self.build()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    made = Workspace(tmp_path_factory.mktemp("resolution") / "ws")
    made.build()
    return made


@pytest.fixture(scope="module")
async def bridge(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPBridge]:
    journal = tmp_path_factory.mktemp("journal")
    args = ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace.root), "--journal-dir", str(journal)]
    config = load_servers({"mcpServers": {"workspace": {"command": sys.executable, "args": args, "trusted": True}}})
    async with MCPBridge(config, log_dir=tmp_path_factory.mktemp("logs")) as live:
        yield live


async def admit(bridge: MCPBridge, tool: str, args: dict[str, Any], policy: dict[str, Any]) -> gateway.Admission:
    rules = gateway.run_policy({"policy": policy}, "coding_assistant")
    [admission] = await gateway.admit_all(
        [gateway.ProposedCall("a0.0", "t0", f"workspace__{tool}", args)], registry=ToolRegistry(bridge.specs()), rules=rules,
        budget=Budget(tool_calls=None, side_effects=None), usage=empty_usage(), breaker_state={}, now=0.0,
    )
    return admission


def hostile_call(kind: str, depth: int, placement: str, use: str, denied: str) -> tuple[str, dict[str, Any]]:
    link = link_path(kind, depth)
    tool, arguments = USES[use]
    return tool, arguments(PLACEMENTS[placement](link, depth, f"{denied}/key.txt"), PLACEMENTS[placement](link, depth, denied))


def test_the_corpus_crosses_every_kind_depth_placement_and_tool() -> None:
    assert len(CORPUS) == len(KINDS) * len(DEPTHS) * len(PLACEMENTS) * len(USES) == 648
    assert hostile_call("file-outside", 3, "right-after", "read", "secrets")[1]["path"] == "d1/d2/file-outside-link/../../../secrets/key.txt"


@pytest.mark.parametrize("variant", POLICIES)
async def test_no_call_reads_or_changes_a_denied_path(bridge: MCPBridge, workspace: Workspace, variant: str, attacks: Attacks) -> None:
    policy, denied = POLICIES[variant]
    leaks: list[str] = []
    stopped = {"gateway": 0, "server": 0}
    before = workspace.denied_state(denied)
    for kind, depth, placement, use in CORPUS:
        tool, args = hostile_call(kind, depth, placement, use, denied)
        admission = await admit(bridge, tool, args, policy)
        if admission.verdict not in ("admit", "ask"):
            stopped["gateway"] += 1
            continue
        outcome = await bridge.call("workspace", tool, args, timeout_s=30)
        stopped["server"] += not outcome.ok
        if SECRET in outcome.text or SECRET in str(outcome.structured):
            leaks.append(f"{tool} {args} read the secret")
        if workspace.denied_state(denied) != before:
            leaks.append(f"{tool} {args} changed {denied}/")
            workspace.restore(denied)
            before = workspace.denied_state(denied)
        workspace.restore(denied)
    attacks.record("symlink-dotdot", attempts=len(CORPUS), escapes=len(leaks))
    assert leaks == []
    assert stopped["gateway"] + stopped["server"] == len(CORPUS)


@pytest.mark.parametrize("variant", POLICIES)
async def test_the_gateway_alone_denies_every_path_that_reaches_the_denied_one_by_name(
    bridge: MCPBridge, variant: str, attacks: Attacks
) -> None:
    """The policy sees the target the server would act on, whatever the server does with it."""
    policy, denied = POLICIES[variant]
    allowed = []
    for kind, depth, placement, use in CORPUS:
        tool, args = hostile_call(kind, depth, placement, use, denied)
        if (admission := await admit(bridge, tool, args, policy)).verdict != "denied":
            allowed.append((tool, args, admission.verdict))
    attacks.record("symlink-dotdot", attempts=len(CORPUS), escapes=len(allowed))
    assert allowed == []


async def test_the_server_alone_refuses_a_dotdot_after_anything_but_a_plain_directory(
    bridge: MCPBridge, workspace: Workspace, attacks: Attacks
) -> None:
    """Without the gateway, the server still acts on no path whose '..' follows a symlink."""
    acted = []
    for kind, depth, placement, use in CORPUS:
        tool, args = hostile_call(kind, depth, placement, use, "secrets")
        outcome = await bridge.call("workspace", tool, args, timeout_s=30)
        if outcome.ok:
            acted.append((tool, args))
        elif "which is not a plain directory here" not in outcome.text:
            acted.append((tool, args, outcome.text))
        workspace.restore("secrets")
    attacks.record("symlink-dotdot", attempts=len(CORPUS), escapes=len(acted))
    assert acted == []


async def test_dotdot_through_plain_directories_still_works(bridge: MCPBridge) -> None:
    """The control: '..' after real directories reads and writes where its text says."""
    read = await bridge.call("workspace", "read_file", {"path": "sub/deeper/../deeper/deepest/../deepest/f.txt"}, timeout_s=30)
    listed = await bridge.call("workspace", "list_files", {"path": "d1/d2/.."}, timeout_s=30)
    assert read.ok and read.structured["content"] == "inside\n"
    assert listed.ok and {entry["path"] for entry in listed.structured["entries"]} >= {"d1/d2", "d1/file-outside-link"}
