"""The policy-bypass table: every known way around a path, collection or command rule, through the
real gateway against the real workspace, sandbox and records servers, then one full run per class
through the graph. The servers themselves would hand the secret over (shown below): the gateway's
decision on the resolved resource is what stops each call."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import psycopg
import pytest
from langchain_core.messages import ToolMessage
from psycopg.types.json import Jsonb

from boundloop.graph.core.budget import Budget, empty_usage
from boundloop.mcp_servers.records.schema import ensure_schema
from boundloop.graph.core.status import Terminal
from tests.conftest import fresh_database
from tests.graph.conftest import CRITIC_PASS, PLAN_ONE_STEP, run_script, runner, step  # noqa: F401 (fixtures)
from tests.mcp_servers.launch import http
from tests.security.attacks import Attacks
from boundloop.tools import gateway
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.registry import ToolRegistry

SECRET = "SECRET-7f3a9c"
USER_RULES = {"rules": [
    {"id": "no-data-secrets", "action": "deny", "paths": ["data/secrets/**"], "reason": "data/secrets is off limits."},
    {"id": "no-payroll", "action": "deny", "collections": ["payroll*"], "reason": "Payroll records are off limits."},
    {"id": "no-ls", "action": "deny", "server": "clean", "commands": ["ls"], "reason": "ls is not to be run."},
]}


def make_root(base: Path) -> Path:
    """A workspace holding secrets/, data/secrets/ and a symlink `link` → secrets/ inside the root."""
    root = base / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key.txt").write_text(f"token={SECRET}\n")
    (root / "data" / "secrets").mkdir(parents=True)
    (root / "data" / "secrets" / "db.txt").write_text(f"db={SECRET}\n")
    (root / "data" / "readme.md").write_text("data lives here\n")
    (root / "sub").mkdir()
    (root / "sub" / "plain.md").write_text("nothing to see\n")
    (root / "notes.md").write_text("Action items:\n- Ana: publish the notes\n")
    (root / "link").symlink_to(root / "secrets")
    return root


def make_clean(base: Path) -> Path:
    """A sandbox root with nothing denied in it, and `myls`, a symlink to ls under another name."""
    clean = base / "clean"
    clean.mkdir()
    (clean / "myls").symlink_to("/bin/ls")
    return clean


def servers(root: Path, clean: Path, db_url: str, only: set[str] | None = None) -> dict[str, Any]:
    """Our servers, trusted, as a servers file names them: the workspace and a sandbox on the root
    with the secrets, a sandbox on the clean root, the records store. `only`: a subset of them."""
    def ours(module: str, *args: str) -> dict[str, Any]:
        return {"command": sys.executable, "args": ["-m", f"boundloop.mcp_servers.{module}", *args], "trusted": True}

    every = {
        "workspace": ours("workspace", "--root", str(root)),
        "sandbox": ours("sandbox", "--root", str(root)),
        "clean": ours("sandbox", "--root", str(clean)),
        "records": ours("records", "--database-url", db_url),
    }
    return {"mcpServers": {name: entry for name, entry in every.items() if only is None or name in only}}


@pytest.fixture(scope="module")
def module_db_url(pg_admin_url: str) -> Iterator[str]:
    with fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(scope="module")
def table_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("bypass"))


@pytest.fixture(scope="module")
async def bridge(table_root: Path, module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MCPBridge]:
    clean = make_clean(table_root.parent)
    config = load_servers(servers(table_root, clean, module_db_url))
    async with MCPBridge(config, log_dir=tmp_path_factory.mktemp("logs")) as live:
        yield live


async def admit(bridge: MCPBridge, name: str, args: dict[str, Any], policy: dict[str, Any] | None = None) -> gateway.Admission:
    rules = gateway.run_policy({"policy": policy or USER_RULES}, "coding_assistant")
    [admission] = await gateway.admit_all(
        [gateway.ProposedCall("a0.0", "t0", name, args)], registry=ToolRegistry(bridge.specs()), rules=rules,
        budget=Budget(tool_calls=None, side_effects=None), usage=empty_usage(), breaker_state={}, now=0.0,
    )
    return admission


SECRETS = "rule:coding_assistant.secrets"
DATA = "rule:no-data-secrets"  # a user rule, named first when both deny (a call reaching the whole root)
BYPASSES = [
    # (case, tool, arguments (ROOT is replaced by the root), rule that must deny, what the reason names)
    ("dot-slash", "workspace__read_file", {"path": "./secrets/key.txt"}, SECRETS, "reaches secrets/key.txt"),
    ("dot-dot", "workspace__read_file", {"path": "sub/../secrets/key.txt"}, SECRETS, "reaches secrets/key.txt"),
    ("dot-dot-through-nothing", "workspace__read_file", {"path": "nowhere/../secrets/key.txt"}, SECRETS, "reaches secrets/key.txt"),
    ("absolute", "workspace__read_file", {"path": "ROOT/secrets/key.txt"}, SECRETS, "reaches secrets/key.txt"),
    ("symlink-in-root", "workspace__read_file", {"path": "link/key.txt"}, SECRETS, "'link/key.txt' reaches secrets/key.txt"),
    ("write-through-symlink", "workspace__write_file", {"path": "link/new.txt", "content": "x"}, SECRETS, "reaches secrets/new.txt"),
    ("search-symlinked-dir", "workspace__search", {"query": "SECRET", "path": "link"}, SECRETS, "reaches secrets"),
    ("move-out-of", "workspace__move_file", {"source": "secrets/key.txt", "destination": "public.txt"}, SECRETS, "reaches secrets/key.txt"),
    ("rename-the-tree", "workspace__move_file", {"source": "secrets", "destination": "open"}, SECRETS, "'secrets' reaches secrets"),
    ("move-into", "workspace__move_file", {"source": "notes.md", "destination": "secrets/notes.md"}, SECRETS, "reaches secrets/notes.md"),
    ("rename-an-ancestor", "workspace__move_file", {"source": "data", "destination": "d2"}, "rule:no-data-secrets", "'data' reaches data"),
    ("search-the-root", "workspace__search", {"query": "SECRET", "path": "."}, DATA, "'.' reaches ."),
    ("list-the-root", "workspace__list_files", {"path": ".", "recursive": True}, DATA, "'.' reaches ."),
    ("list-a-parent", "workspace__list_files", {"path": "data", "recursive": True}, "rule:no-data-secrets", "'data' reaches data"),
    ("sandbox-command", "sandbox__run_command", {"argv": ["cat", "secrets/key.txt"]}, DATA, "reaches ."),
    ("sandbox-code", "sandbox__run_python", {"code": "print(open('secrets/key.txt').read())"}, DATA, "reaches ."),
    ("sandbox-cwd", "sandbox__run_command", {"argv": ["cat", "key.txt"], "cwd": "link"}, DATA, "reaches"),
    ("collection", "records__query_records", {"collection": "payroll"}, "rule:no-payroll", "collection 'payroll'"),
    ("collection-glob", "records__get_record", {"collection": "payroll_2024", "id": "x"}, "rule:no-payroll", "collection 'payroll_2024'"),
    ("collection-write", "records__create_record", {"collection": "payroll", "data": {}}, "rule:no-payroll", "collection 'payroll'"),
    ("command-by-path", "clean__run_command", {"argv": ["/bin/ls", "-la"]}, "rule:no-ls", "command '/bin/ls'"),
    ("command-by-symlink", "clean__run_command", {"argv": ["ROOT/../clean/myls"]}, "rule:no-ls", "/clean/myls'"),
    ("command-by-relative-path", "clean__run_command", {"argv": ["./myls"]}, "rule:no-ls", "command './myls'"),
    ("command-by-name", "clean__run_command", {"argv": ["ls"]}, "rule:no-ls", "command 'ls'"),
]
ALLOWED = [
    ("workspace__read_file", {"path": "notes.md"}),
    ("workspace__read_file", {"path": "./sub/../notes.md"}),
    ("workspace__list_files", {"path": "sub", "recursive": True}),
    ("workspace__search", {"query": "SECRET", "path": "sub"}),
    ("workspace__list_files", {"path": "data/readme.md"}),
    ("workspace__move_file", {"source": "sub/plain.md", "destination": "sub/moved.md"}),
    ("records__query_records", {"collection": "orders"}),
    ("clean__run_command", {"argv": ["echo", "hi"]}),
]


@pytest.mark.parametrize(("case", "name", "args", "rule", "names"), BYPASSES, ids=[case[0] for case in BYPASSES])
async def test_each_bypass_is_denied_at_the_gateway(bridge, table_root, case, name, args, rule, names, attacks: Attacks) -> None:
    def rooted(value: Any) -> Any:
        return [rooted(item) for item in value] if isinstance(value, list) else value.replace("ROOT", str(table_root)) if isinstance(value, str) else value

    args = {key: rooted(value) for key, value in args.items()}
    admission = await admit(bridge, name, args)
    attacks.record("policy-bypass", attempts=1, escapes=admission.verdict != "denied")
    assert (admission.verdict, admission.call.get("rule")) == ("denied", rule), admission.message
    assert names in admission.message


@pytest.mark.parametrize(("name", "args"), ALLOWED, ids=[f"{name}:{args}" for name, args in ALLOWED])
async def test_what_stays_clear_of_denied_resources_is_not_denied(bridge, name, args) -> None:
    assert (await admit(bridge, name, args)).verdict in {"admit", "ask"}


async def test_the_servers_alone_would_hand_the_secret_over(bridge) -> None:
    """Without the gateway's decision these calls leak: the bypasses above are real."""
    for tool, args in [("search", {"query": "SECRET", "path": "."}), ("read_file", {"path": "sub/../secrets/key.txt"}),
                       ("read_file", {"path": "./secrets/key.txt"})]:
        outcome = await bridge.call("workspace", tool, args, timeout_s=30)
        assert outcome.ok and SECRET in outcome.text, (tool, args, outcome.text)


async def test_an_edit_is_decided_on_what_it_reaches(bridge, attacks: Attacks) -> None:
    """The permission the approve node re-asks on an edit resolves paths like the gate."""
    rules = gateway.run_policy({}, "coding_assistant")
    spec = ToolRegistry(bridge.specs()).get("workspace__delete_file")
    attacks.record("policy-bypass", attempts=1, escapes=gateway.permission(rules, spec, {"path": "link/key.txt"}).action != "deny")
    assert gateway.permission(rules, spec, {"path": "link/key.txt"}).action == "deny"
    assert gateway.permission(rules, spec, {"path": "notes.md"}).action == "ask"


async def test_a_server_without_a_known_root_fails_closed_for_path_rules(tmp_path: Path, attacks: Attacks) -> None:
    """Our workspace server over HTTP: the gateway cannot see its root unless the servers file says
    it, so path rules deny every path argument; declared, the paths resolve and decide normally."""
    root = make_root(tmp_path)
    with http("workspace", "--root", str(root)) as url:
        for entry, expected in (({"url": url, "trusted": True}, "denied"),
                                ({"url": url, "trusted": True, "root": str(root)}, "admit")):
            async with MCPBridge(load_servers({"mcpServers": {"workspace": entry}}), log_dir=tmp_path) as live:
                notes = await admit(live, "workspace__read_file", {"path": "notes.md"})
                secret = await admit(live, "workspace__read_file", {"path": "link/key.txt"})
            attacks.record("policy-bypass", attempts=1, escapes=secret.verdict != "denied")
            assert (notes.verdict, secret.verdict) == (expected, "denied")
            if expected == "denied":
                assert 'fail closed; declare "root"' in notes.message


async def test_path_arguments_of_another_server_are_what_the_servers_file_declares(tmp_path: Path, attacks: Attacks) -> None:
    """An untrusted server's schema marks count for nothing. Undeclared, arguments named like paths
    are paths (so moving a file into a new directory under secrets/ is denied); declared, exactly the
    declared ones are. Whatever is declared, an argument naming an existing place under the root
    (the symlink to secrets/) is a mention that deny rules see."""
    root = make_root(tmp_path)
    base = {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(root)]}
    declared = {**base, "root": str(root), "path_arguments": {"read_*": ["path"]}}
    verdicts = []
    for entry in (base, declared):
        async with MCPBridge(load_servers({"mcpServers": {"files": entry}}), log_dir=tmp_path) as live:
            moved = await admit(live, "files__move_file", {"source": "notes.md", "destination": "secrets/new/notes.md"})
            linked = await admit(live, "files__move_file", {"source": "link", "destination": "open"})
            read = await admit(live, "files__read_file", {"path": "./secrets/key.txt"})
            notes = await admit(live, "files__read_file", {"path": "notes.md"})
        verdicts.append((moved.verdict, linked.verdict, read.verdict, notes.verdict, notes.call["side_effect"]))
        attempted = (moved, linked, read) if entry is base else (linked, read)  # declared, `destination` is no path
        attacks.record("policy-bypass", attempts=len(attempted), escapes=sum(admission.verdict != "denied" for admission in attempted))
    assert verdicts == [("denied", "denied", "denied", "ask", True), ("ask", "denied", "denied", "ask", True)]


# One full run per class through the graph.

@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The graph fixtures' workspace, here with secrets in it."""
    return make_root(tmp_path)


def _messages(report) -> list[str]:
    return [str(message.content) for message in report.values["messages"] if isinstance(message, ToolMessage)]


GRAPH_CLASSES = {
    # class: the actor's turns of calls; the profile's own secrets/ rule is the only rule, except for records
    "normalised-path": [[{"name": "workspace__search", "args": {"query": "SECRET", "path": "sub/../secrets"}},
                         {"name": "workspace__read_file", "args": {"path": "./sub/../secrets/key.txt"}}]],
    "symlink": [[{"name": "workspace__read_file", "args": {"path": "link/key.txt"}}]],
    "rename-then-read": [[{"name": "workspace__move_file", "args": {"source": "secrets", "destination": "open"}}],
                         [{"name": "workspace__read_file", "args": {"path": "open/key.txt"}}]],
    "read-scope": [[{"name": "workspace__search", "args": {"query": "SECRET", "path": "."}}]],
    "sandbox": [[{"name": "sandbox__run_command", "args": {"argv": ["cat", "secrets/key.txt"]}}]],
    "collection": [[{"name": "records__query_records", "args": {"collection": "payroll"}}]],
}


@pytest.mark.parametrize("turns", GRAPH_CLASSES.values(), ids=GRAPH_CLASSES.keys())
async def test_a_full_run_never_sees_the_secret(run_script, workspace, db_url, turns, attacks: Attacks) -> None:
    """The shipped coding_assistant profile, attended: a denied call never waits for a human either."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:  # a payroll record not to read
        await ensure_schema(conn)
        await conn.execute("INSERT INTO records (collection, id, data) VALUES ('payroll', 'ana', %s)", (Jsonb({"salary": SECRET}),))
    used = {call["name"].split("__")[0] for calls in turns for call in calls}
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [*(step(calls=calls) for calls in turns), step("done")], "critic": [CRITIC_PASS]},
        servers=servers(workspace, workspace.parent / "unused", db_url, only={"workspace", *used}),
        policy=USER_RULES if "records" in used else None,
    )
    texts = _messages(report)
    harmed = (workspace / "secrets" / "key.txt").read_text() != f"token={SECRET}\n"
    attacks.record("policy-bypass", attempts=sum(len(calls) for calls in turns), escapes=sum(SECRET in text for text in texts) + harmed)
    assert report.status == Terminal.SUCCESS and not report.interrupts
    assert not any(SECRET in text for text in texts), texts
    assert len(texts) == sum(len(calls) for calls in turns) and texts[0].startswith("denied: ")
    assert (workspace / "secrets" / "key.txt").read_text() == f"token={SECRET}\n"


async def test_a_symlink_made_while_a_call_waits_for_approval_cannot_carry_it_into_secrets(run_script, runner, workspace, attacks: Attacks) -> None:
    """A read of scratch/peek/key.txt is asked about while peek does not exist; before the human
    approves, something else makes scratch/peek a symlink to secrets/. The policy is asked again
    right before dispatch, on what the path reaches then."""
    (workspace / "scratch").mkdir()
    peek = {"name": "workspace__read_file", "args": {"path": "scratch/peek/key.txt"}}
    ask = {"rules": [{"id": "ask-reads", "action": "ask", "server": "workspace", "tool": "read_file"}]}
    waiting = await run_script({"planner": [PLAN_ONE_STEP], "actor": [step(calls=[peek]), step("done")], "critic": [CRITIC_PASS]},
                               policy=ask)
    [item] = waiting.interrupts
    assert item["value"]["rule"] == "rule:ask-reads"
    (workspace / "scratch" / "peek").symlink_to(workspace / "secrets")
    done = await runner.resume(waiting.thread_id, decisions={item["id"]: {"decision": "approve"}})
    assert done.status == Terminal.SUCCESS
    [read] = _messages(done)
    attacks.record("policy-bypass", attempts=1, escapes=SECRET in read)
    assert read.startswith("denied: workspace__read_file now reaches a resource it may not (rule:coding_assistant.secrets: ")
    assert "'scratch/peek/key.txt' reaches secrets/key.txt" in read and SECRET not in read
