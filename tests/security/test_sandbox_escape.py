"""Each way a snippet could get out of a weaker sandbox, tried against a real sandbox server: all contained.

The ways: read /etc/shadow (the server runs as root here), write outside its root,
connect to a Unix socket of the host, outlive the wall-time kill with setsid() and a double fork,
fork without limit, and kill its own server. What the sandbox does and does not contain is listed
in mcp_servers/README.md ("Sandbox").
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.mcp_servers.launch import exited, http, stdio, structured
from tests.mcp_servers.sandboxes import all_gone, processes_with, searchable_root, sleeper, token
from tests.security.attacks import Attacks


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    with searchable_root() as path:
        yield path


@pytest.fixture(scope="module")
def url(root: Path) -> Iterator[str]:
    with http("sandbox", "--root", str(root)) as served:
        yield served


@pytest.fixture
def mark() -> Iterator[str]:
    """A token for the command lines of a test's processes; any left alive are killed afterwards."""
    value = token()
    yield value
    for pid in processes_with(value):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def run_python(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    return structured(await client.call_tool("run_python", {"code": code, **arguments}))


async def test_a_snippet_cannot_read_files_only_root_may_read(url: str, attacks: Attacks) -> None:
    """The snippet runs as an unprivileged user, so /etc/shadow (root:shadow 0640) is closed to it."""
    code = "try:\n    print(open('/etc/shadow').read())\nexcept OSError as e:\n    print('refused', e.errno)"
    async with Client(url) as client:
        result = await run_python(client, code)
    attacks.record("sandbox-escape", attempts=1, escapes="root:" in result["stdout"])
    assert result["stdout"] == "refused 13\n"


async def test_a_snippet_writes_only_its_root_and_a_private_tmp(url: str, root: Path, mark: str, attacks: Attacks) -> None:
    """Every other place is read-only or absent in the sandbox; /tmp is the sandbox's own."""
    outside = root.parent / "outside"
    outside.mkdir(mode=0o777, exist_ok=True)
    outside.chmod(0o777)
    targets = [f"{outside}/{mark}", f"/etc/{mark}", f"/usr/{mark}", f"/{mark}", f"/var/tmp/{mark}", f"/tmp/{mark}"]
    code = (
        "import sys\n"
        f"for target in {targets!r} + ['{mark}']:\n"
        "    try:\n"
        "        open(target, 'w').write('x')\n"
        "        print('wrote', target)\n"
        "    except OSError as e:\n"
        "        print('refused', target)\n"
    )
    try:
        async with Client(url) as client:
            result = await run_python(client, code)
        written = {Path(target) for target in targets if Path(target).exists()}
    finally:
        for target in targets:
            Path(target).unlink(missing_ok=True)
    attacks.record("sandbox-escape", attempts=len(targets), escapes=len(written))
    assert written == set()
    assert result["stdout"].splitlines()[-2:] == [f"wrote /tmp/{mark}", f"wrote {mark}"]
    assert all(line.startswith("refused") for line in result["stdout"].splitlines()[:-2])
    assert (root / mark).read_text() == "x"


async def test_a_snippet_cannot_connect_to_a_unix_socket_of_the_host(url: str, root: Path, mark: str, attacks: Attacks) -> None:
    """Neither a socket file outside the root (not mounted) nor an abstract one (another network namespace)."""
    path = root.parent / f"{mark}.sock"
    with socket.socket(socket.AF_UNIX) as by_path, socket.socket(socket.AF_UNIX) as abstract:
        by_path.bind(str(path))
        path.chmod(0o777)
        abstract.bind(f"\0{mark}")
        for listener in (by_path, abstract):
            listener.listen()
            listener.setblocking(False)
        code = (
            "import socket\n"
            f"for address in [{str(path)!r}, '\\0{mark}']:\n"
            "    try:\n"
            "        socket.socket(socket.AF_UNIX).connect(address)\n"
            "        print('connected')\n"
            "    except OSError as e:\n"
            "        print('refused', e.errno)\n"
        )
        async with Client(url) as client:
            result = await run_python(client, code)
        attacks.record("sandbox-escape", attempts=2, escapes=result["stdout"].count("connected"))
        for listener in (by_path, abstract):
            with pytest.raises(BlockingIOError):
                listener.accept()
    assert result["stdout"] == "refused 2\nrefused 111\n"  # ENOENT, ECONNREFUSED


DAEMONIZE = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('{mark}.started', 'w').close()
        os.execvp('python3', ['python3', '-c', {sleeper!r}])
    os._exit(0)
{then}
"""


@pytest.mark.parametrize("then", ["time.sleep(600)", "exit"], ids=["killed-at-deadline", "exits-at-once"])
async def test_setsid_and_a_double_fork_do_not_outlive_the_run(url: str, root: Path, mark: str, then: str, attacks: Attacks) -> None:
    """The daemon left the snippet's session and process group; it still dies with the PID namespace.
    The snippet that exits at once waits only until its daemon has started: on a busy machine the
    namespace could otherwise end before the daemon ran at all, and prove nothing."""
    killed = then != "exit"
    if not killed:
        then = f"while not os.path.exists('{mark}.started'):\n    time.sleep(0.01)"
    code = DAEMONIZE.format(mark=mark, sleeper=sleeper(mark), then=then)
    async with Client(url) as client:
        result = await run_python(client, code, timeout_s=3 if killed else 30)
    gone = all_gone(mark)
    attacks.record("sandbox-escape", attempts=1, escapes=not gone)
    assert result["timed_out"] is killed
    assert (root / f"{mark}.started").exists()
    assert gone


async def test_a_snippet_sees_only_its_own_processes_and_has_no_capabilities(url: str, attacks: Attacks) -> None:
    """Its own PID namespace (bwrap's init, the snippet) and an empty effective capability set."""
    code = (
        "import os\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
        "print(os.getuid())\n"
    )
    async with Client(url) as client:
        result = await run_python(client, code)
    processes, capabilities, uid = result["stdout"].splitlines()
    attacks.record("sandbox-escape", attempts=3, escapes=(processes != "[1, 2]") + (capabilities != "0000000000000000") + (uid == "0"))
    assert processes == "[1, 2]"
    assert capabilities == "0000000000000000"
    assert uid != "0"


async def test_forking_stops_at_the_process_limit(mark: str, attacks: Attacks) -> None:
    """A bounded fork loop (at most 100 children) gets EAGAIN at --max-processes."""
    code = (
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno)\n"
        "print(made)\n"
        f"# {mark}\n"
    )
    with searchable_root() as root:
        async with stdio("sandbox", "--root", str(root), "--max-processes", "16") as (client, _):
            result = await run_python(client, code)
    stopped, made = result["stdout"].splitlines()
    attacks.record("sandbox-escape", attempts=1, escapes=int(made) >= 16)
    assert stopped == "stopped 11"  # EAGAIN
    assert int(made) < 16


async def test_a_snippet_cannot_kill_its_own_server(mark: str, attacks: Attacks) -> None:
    """The server's PID does not exist in the sandbox's PID namespace, and the user differs."""
    with searchable_root() as root:
        async with stdio("sandbox", "--root", str(root)) as (client, server):
            code = (
                "import os, signal\n"
                f"try:\n    os.kill({server}, signal.SIGKILL)\n    print('killed')\n"
                "except OSError as e:\n    print('refused', e.errno)\n"
            )
            result = await run_python(client, code)
            after = await run_python(client, "print('still serving')")
            survived = not exited(server, timeout_s=0.1)
            attacks.record("sandbox-escape", attempts=1, escapes=not survived or result["stdout"] == "killed\n")
            assert survived
    assert result["stdout"] == "refused 3\n"  # ESRCH
    assert after["stdout"] == "still serving\n"
