"""masks: which places under the sandbox root a glob hides, read as the gateway's path rules read it."""

from __future__ import annotations

from pathlib import Path

from boundloop.mcp_servers.sandbox.masks import bwrap_flags, hidden


def test_globs_name_directories_files_and_nothing_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for rel in ("secrets/a.txt", "secrets/deep/b.txt", "config/app.key", "config/x/y.key", "plain.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    (root / "link.key").symlink_to(root / "plain.txt")
    (tmp_path / "outside").mkdir()
    globs = [f"{root}/secrets/**", f"{root}/*.key", f"{root}/secrets/deep/**", f"{tmp_path}/outside/**", f"{root}/missing/**"]

    assert hidden(root, globs) == {
        (f"{root}/secrets", True),  # `dir/**` names dir itself; what is below it needs no mask of its own
        (f"{root}/config/app.key", False),  # `*` crosses '/'
        (f"{root}/config/x/y.key", False),
    }  # the symlink link.key is left alone: what it points to is masked where a rule names it
    assert bwrap_flags(root, globs[:1]) == ["--tmpfs", f"{root}/secrets"]
    assert bwrap_flags(root, [f"{root}/plain.txt"]) == ["--ro-bind", "/dev/null", f"{root}/plain.txt"]
    assert bwrap_flags(root, [f"{root}/**"]) == ["--tmpfs", str(root)]  # the whole root, if a rule says so
