"""jail: the first program of every sandbox child; it locks its own process down, then becomes the command.

Run by the runner as `python -I -S jail.py [limits] -- COMMAND...` in a new session (so the child
leads its own process group). Standard library only, never imported by the server: doing this
work here, after the fork, keeps the server free of `preexec_fn`, which is unsafe in a process
with threads.

In order:
1. resource limits: CPU seconds (SIGXCPU at the soft limit, SIGKILL a second later), address
   space, size of any file written, and no core dumps;
2. unless --allow-network: a new user namespace holding a new network namespace. The child then
   sees only a loopback interface that is down, so every connect fails (even to 127.0.0.1) and
   DNS cannot resolve. Its ids map to themselves, so files it writes keep their owner. Because the
   child's capabilities now live in the new user namespace only, even a root child cannot
   `setns` back into the host network or raise its hard limits. This works as root and, where
   the kernel allows unprivileged user namespaces, as any user. Not covered: Unix sockets that
   exist as files (a database socket in /tmp, say) stay reachable, since they are not part of
   the network namespace;
3. SIGPIPE and SIGXFSZ back to their defaults (Python ignores them, and ignored signals survive exec);
4. exec the command, looked up on PATH.

Exit status when the command never starts: 125 if the lockdown failed (the reason is on stderr),
127 if the command was not found, 126 if it could not be executed. `--probe` stops after step 2
and exits 0, which is how the server learns whether isolation works on this host.
"""

import argparse
import ctypes
import os
import resource
import signal
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
LOCKDOWN_FAILED = 125
NOT_EXECUTABLE = 126
NOT_FOUND = 127


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="jail.py")
    parser.add_argument("--cpu-s", type=int, required=True)
    parser.add_argument("--memory-bytes", type=int, required=True)
    parser.add_argument("--file-size-bytes", type=int, required=True)
    parser.add_argument("--allow-network", action="store_true")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (args.cpu_s, args.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (args.memory_bytes, args.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.file_size_bytes, args.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if not args.allow_network:
            _isolate_network()
    except (OSError, ValueError) as exc:
        print(f"sandbox: could not lock the child down: {exc}", file=sys.stderr)
        return LOCKDOWN_FAILED
    if args.probe:
        return 0
    if not args.command:
        print("sandbox: no command given", file=sys.stderr)
        return LOCKDOWN_FAILED
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execvp(args.command[0], args.command)
    except FileNotFoundError:
        print(f"sandbox: command not found: {args.command[0]!r}", file=sys.stderr)
        return NOT_FOUND
    except OSError as exc:
        print(f"sandbox: cannot execute {args.command[0]!r}: {exc.strerror}", file=sys.stderr)
        return NOT_EXECUTABLE


def _isolate_network() -> None:
    uid, gid = os.geteuid(), os.getegid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWUSER | CLONE_NEWNET) failed: {os.strerror(code)}")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
