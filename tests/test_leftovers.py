"""The leak check sees a detached server of ours and nothing outside our own process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.leftovers import server_processes

# A stand-in "server": its command line carries a marker; it double-forks and setsid()s away.
DETACHED = (
    "import os, sys, time\n"
    "if os.fork(): sys.exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): sys.exit(0)\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_detached_orphan_stays_visible_and_others_do_not_count() -> None:
    launcher = subprocess.Popen([sys.executable, "-c", DETACHED, "mcp_servers.fake"], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    orphan = int(launcher.stdout.readline())
    launcher.stdout.close()
    launcher.wait(timeout=10)
    try:
        time.sleep(0.2)
        assert any(line.startswith(f"{orphan} ") for line in server_processes())
        # Seen from another process tree (pid 2, the kernel's thread parent), it is not counted.
        assert not any(line.startswith(f"{orphan} ") for line in server_processes(ancestor=2))
    finally:
        os.kill(orphan, signal.SIGKILL)
        time.sleep(0.2)
        try:
            os.waitpid(orphan, 0)  # we are its subreaper now
        except ChildProcessError:
            pass
    assert not any(line.startswith(f"{orphan} ") for line in server_processes())
