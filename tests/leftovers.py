"""leftovers: find MCP server processes this test session started and did not reap."""

from __future__ import annotations

import os
import time
from pathlib import Path

SERVER_MARKERS = ("mcp_servers.", "probe_server.py", "mcp-server-time", "server-everything", "langgraph dev", "langgraph_api")
"""Command-line fragments of every server process the suite starts."""


def boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise RuntimeError("/proc/stat has no btime line")


def server_processes(started_after: float) -> list[str]:
    """`pid command` of each live server process started after `started_after` (epoch seconds)."""
    ticks, booted, found = os.sysconf("SC_CLK_TCK"), boot_time(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # it ended while we looked
        state, start_ticks = stat.rsplit(")", 1)[1].split()[0], int(stat.rsplit(")", 1)[1].split()[19])
        if state != "Z" and booted + start_ticks / ticks >= started_after and any(marker in command for marker in SERVER_MARKERS):
            found.append(f"{entry.name} {command}")
    return found


def wait_for_none(started_after: float, within_s: float = 15.0) -> list[str]:
    """Give servers that are shutting down a moment; return those still alive after it."""
    deadline = time.monotonic() + within_s
    while (alive := server_processes(started_after)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive
