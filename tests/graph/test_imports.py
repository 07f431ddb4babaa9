"""The CLI loads what a command needs: starting or resuming a run never imports the worker pool's
engine (Procrastinate) or the OAuth login's (cryptography, boundloop.tools.oauth)."""

from __future__ import annotations

import subprocess
import sys

ONLY_FOR_OTHER_COMMANDS = ("procrastinate", "boundloop.graph.run.workers", "boundloop.tools.oauth", "cryptography.fernet")


def test_importing_the_cli_leaves_out_the_worker_pool_and_oauth() -> None:
    probe = f"import sys, boundloop.graph.cli.app; print(sorted(m for m in {ONLY_FOR_OTHER_COMMANDS!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
