"""launch: `python -S launch.py SOCKET TARGET ARGS...` — be TARGET's process, run by the forkserver.

Hands this process's stdin, stdout and stderr, its arguments, environment and working directory
to the forkserver listening on SOCKET, which forks a preloaded child to run TARGET with them.
Then ends the way the child ended: the same exit code, or killed by the same signal (so a
SIGKILL at a crash point reads as returncode -9 here too). Standard library only, so `-S`
starts it in milliseconds.
"""

import json
import os
import signal
import socket
import sys


def main() -> None:
    path, target, *argv = sys.argv[1:]
    for fd in (0, 1, 2):  # a closed one would be reused by the socket below and handed over as itself
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(path)
        request = {"target": target, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        # The child holds the real stdin and stdout now; our copies would keep pipes open past it.
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        reply = conn.recv(4096)
    code = json.loads(reply)["exit"] if reply else 70
    if code < 0:
        if -code != signal.SIGKILL:  # SIGKILL cannot be caught; Python catches SIGINT
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
