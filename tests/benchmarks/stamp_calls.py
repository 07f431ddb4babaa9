"""A stdio pass-through in front of an MCP server that notes when the first tool call arrives.

    python -m tests.benchmarks.stamp_calls STAMP_FILE -- COMMAND [ARGS...]

Starts COMMAND, copies our stdin to it and its stdout to ours, byte for byte, and writes the wall
time (`time.time()`) of the first JSON-RPC line asking `tools/call` to STAMP_FILE. It imports
nothing heavy, so it adds the same few milliseconds to every system measured through it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def main() -> int:
    stamp, command = Path(sys.argv[1]), sys.argv[sys.argv.index("--") + 1:]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert server.stdin is not None and server.stdout is not None
    threading.Thread(target=_pump, args=(server.stdout.fileno(), sys.stdout.fileno()), daemon=True).start()
    stamped = False
    for line in sys.stdin.buffer:
        if not stamped and b'"tools/call"' in line:
            stamp.write_text(repr(time.time()))
            stamped = True
        server.stdin.write(line)
    server.stdin.close()
    return server.wait()


def _pump(source: int, target: int) -> None:
    while chunk := os.read(source, 65536):
        os.write(target, chunk)


if __name__ == "__main__":
    sys.exit(main())
