"""Finding the PostgreSQL server programs the embedded cluster needs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boundloop.checkpoints import PostgresNotInstalled
from boundloop.checkpoints import binaries
from boundloop.checkpoints.binaries import find_server_bindir, server_bindir


def test_the_found_directory_holds_initdb_pg_ctl_and_postgres() -> None:
    """The suite needs a server; tests/run.sh installs one when it is missing."""
    bindir = find_server_bindir()
    assert bindir is not None
    assert all(os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))


def test_the_highest_installed_version_is_tried_first(tmp_path: Path) -> None:
    for version in ("9.6", "16", "15"):
        (tmp_path / version / "bin").mkdir(parents=True)
    ordered = binaries._newest_first(tmp_path.glob("*/bin"))
    assert [d.parent.name for d in ordered] == ["16", "15", "9.6"]


def test_without_binaries_and_without_install_the_error_names_the_search_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(binaries, "_candidate_dirs", lambda: iter(()))
    with pytest.raises(PostgresNotInstalled) as caught:
        server_bindir(install=False)
    assert str(caught.value) == (
        "PostgreSQL server binaries (initdb, pg_ctl) not found in pg_config --bindir, PATH, "
        "/usr/lib/postgresql/*/bin or /usr/pgsql-*/bin. Fix: install PostgreSQL (Debian/Ubuntu: "
        "apt-get install postgresql), or set BOUNDLOOP_DATABASE_URL to an existing PostgreSQL "
        "database."
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="only root installs packages")
def test_with_install_as_root_the_apt_commands_are_announced_and_their_failure_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stand-in commands replace apt-get: the second fails the way a broken mirror would."""
    monkeypatch.setattr(binaries, "_candidate_dirs", lambda: iter(()))
    failing = ("sh", "-c", "echo E: no mirror >&2; exit 100")
    monkeypatch.setattr(binaries, "APT_COMMANDS", (("true",), failing))
    with pytest.raises(PostgresNotInstalled) as caught:
        server_bindir(install=True)
    assert capsys.readouterr().err == (
        "boundloop: PostgreSQL not found; running: true\n"
        "boundloop: PostgreSQL not found; running: sh -c echo E: no mirror >&2; exit 100\n"
    )
    assert str(caught.value) == (
        "sh -c echo E: no mirror >&2; exit 100 failed (exit 100): E: no mirror. Fix: install "
        "PostgreSQL (Debian/Ubuntu: apt-get install postgresql), or set BOUNDLOOP_DATABASE_URL to "
        "an existing PostgreSQL database."
    )
