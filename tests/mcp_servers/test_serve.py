"""Every server started over stdio exits on its own, with status 0, once its stdin closes.

This is what keeps a crashed or careless client from leaving server processes behind (the SDK's
client would otherwise fall back to SIGTERM after two seconds, hiding a server that never exits).
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp_servers.launch import EXIT_TIMEOUT_S, REPO, START_TIMEOUT_S

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}


@pytest.mark.parametrize("server", ["workspace", "records", "sandbox"])
def test_a_stdio_server_exits_with_status_0_when_stdin_closes_after_a_session(
    server: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server answers an initialize request, then ends by itself when the pipe closes."""
    if server == "records":
        args = ["--database-url", request.getfixturevalue("records_db_url")]
    else:
        args = ["--root", str(tmp_path / "root")]
    process = subprocess.Popen(
        [sys.executable, "-m", f"boundloop.mcp_servers.{server}", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE) + "\n")
    process.stdin.flush()
    readable, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    assert readable, f"{server} did not answer initialize"
    assert json.loads(process.stdout.readline())["result"]["serverInfo"]["name"] == f"boundloop-{server}"
    process.stdin.close()
    assert process.wait(timeout=EXIT_TIMEOUT_S) == 0
    process.stdout.close()
