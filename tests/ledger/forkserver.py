"""forkserver: start the CLI and the MCP servers as forks of one preloaded interpreter.

Every process of the kill harness would otherwise spend seconds of CPU importing LangGraph, the
MCP SDK and psycopg before doing anything; on two CI cores that alone blows the suite's budget.
`python -m tests.ledger.forkserver SOCKET` imports them once, prints `ready`, and then, for each
launcher that connects (tests/ledger/launch.py), forks a child that takes over the launcher's
stdin, stdout, stderr, arguments, environment and working directory and runs the target's own
entry point — `boundloop.graph.cli.app:app` (the `boundloop` script) or a server's `main`. The child is a real
process of its own: its crash points SIGKILL it, its stdio pipes are real. Its exit status goes
back to the launcher; a launcher that goes away first takes its child with it (SIGKILL).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any, Callable

from boundloop.graph.cli.app import app
from boundloop.mcp_servers.records.__main__ import main as records_main
from boundloop.mcp_servers.workspace.__main__ import main as workspace_main
from tests.tools.servers.probe_server import main as probe_main


TARGETS: dict[str, tuple[str, Callable[[list[str]], Any]]] = {
    "boundloop": ("boundloop", lambda argv: app(args=argv, prog_name="boundloop")),
    "workspace": ("python -m boundloop.mcp_servers.workspace", lambda argv: workspace_main()),
    "records": ("python -m boundloop.mcp_servers.records", lambda argv: records_main()),
    "probe": ("probe_server.py", probe_main),
}
"""Target name → (sys.argv[0] in the child, its entry point given the arguments)."""


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the fork: become the launcher's process, run the target, never return."""
    code = 1
    try:
        for number, fd in enumerate(fds):
            os.dup2(fd, number)
        os.closerange(3, 65536)  # the listener, other launchers' connections, pidfds
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        prog, main = TARGETS[request["target"]]
        sys.argv = [prog, *request["argv"]]
        main(request["argv"])
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def serve(path: str) -> None:
    assert threading.active_count() == 1, "a thread started at import; forking would copy a half-held lock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("accept",))
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            event = key.data
            if event[0] == "accept":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, ("launch",))
            elif event[0] == "launch":
                _launch(selector, key.fileobj)
            elif event[0] == "gone":  # the launcher closed its end before its child ended
                selector.unregister(key.fileobj)
                try:
                    os.kill(event[1], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            else:  # "exit": the child ended; tell its launcher how
                _, pid, conn = event
                selector.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    selector.unregister(conn)
                except KeyError:
                    pass
                try:
                    conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


def _launch(selector: selectors.BaseSelector, conn: Any) -> None:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if not message or len(fds) != 3:
        selector.unregister(conn)
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    selector.modify(conn, selectors.EVENT_READ, ("gone", pid))
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, ("exit", pid, conn))


if __name__ == "__main__":
    serve(sys.argv[1])
