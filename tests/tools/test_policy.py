"""tools/policy.py: precedence, annotation trust, unattended mode, argument globs, presets, hash."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from boundloop.tools.errors import PolicyError
from boundloop.tools.policy import NO_ROOT, PROFILE_RULES, Decision, Policy, Rule, decide, load_policy
from boundloop.tools.registry import ToolHints, ToolSpec
from boundloop.tools.resources import MARK, resolve

READ_ONLY = ToolHints(read_only=True, destructive=False, idempotent=True, open_world=False)
OPEN_READ = ToolHints(read_only=True, destructive=False, idempotent=True, open_world=True)
DESTRUCTIVE = ToolHints(read_only=False, destructive=True, idempotent=False, open_world=False)
CLOSED_WRITE = ToolHints(read_only=False, destructive=False, idempotent=False, open_world=False)
OPEN_WRITE = ToolHints(read_only=False, destructive=False, idempotent=False, open_world=True)
UNANNOTATED = ToolHints.from_annotations(None)


def tool(name: str = "read_file", hints: ToolHints = READ_ONLY, *, server: str = "workspace", trusted: bool = True) -> ToolSpec:
    return ToolSpec(server=server, name=name, description="", input_schema={}, hints=hints, trusted=trusted)


def allow(**keys: Any) -> Rule:
    return Rule(action="allow", **{"id": "allow-it", **keys})


def ask(**keys: Any) -> Rule:
    return Rule(action="ask", **{"id": "ask-it", **keys})


def deny(**keys: Any) -> Rule:
    return Rule(action="deny", **{"id": "deny-it", **keys})


@pytest.mark.parametrize(("rules", "spec", "action", "rule_id"), [
    # defaults from trusted hints
    ([], tool(hints=READ_ONLY), "allow", "default:read_only"),
    ([], tool(hints=OPEN_READ), "allow", "default:read_only"),
    ([], tool(hints=DESTRUCTIVE), "ask", "default:destructive"),
    ([], tool(hints=UNANNOTATED), "ask", "default:unannotated"),
    ([], tool(hints=OPEN_WRITE), "ask", "default:open_world"),
    ([], tool(hints=CLOSED_WRITE), "ask", "default:write"),
    # any matching rule beats the default, both ways
    ([allow()], tool(hints=DESTRUCTIVE), "allow", "rule:allow-it"),
    ([ask()], tool(hints=READ_ONLY), "ask", "rule:ask-it"),
    # deny > ask > allow across all matching rules, whatever their order
    ([allow(), ask()], tool(), "ask", "rule:ask-it"),
    ([ask(), allow()], tool(), "ask", "rule:ask-it"),
    ([allow(), deny(), ask()], tool(), "deny", "rule:deny-it"),
    ([deny(tool="write_*"), allow()], tool(), "allow", "rule:allow-it"),
    # server and tool globs
    ([deny(server="work*", tool="read_*")], tool(), "deny", "rule:deny-it"),
    ([deny(server="other")], tool(), "allow", "default:read_only"),
    # the first rule of the winning action is the one named
    ([ask(id="first"), ask(id="second")], tool(), "ask", "rule:first"),
])
def test_precedence(rules: list[Rule], spec: ToolSpec, action: str, rule_id: str) -> None:
    decision = decide(Policy(rules=tuple(rules)), spec, {})
    assert (decision.action, decision.rule_id) == (action, rule_id)


@pytest.mark.parametrize("hints", [READ_ONLY, DESTRUCTIVE, CLOSED_WRITE, UNANNOTATED])
def test_an_untrusted_server_always_defaults_to_ask(hints: ToolHints) -> None:
    """Its read-only claim cannot relax the decision, and nothing it claims makes it looser than ask."""
    decision = decide(Policy(), tool(hints=hints, server="web", trusted=False), {})
    assert decision == Decision(
        "ask", "default:untrusted",
        "web__read_file comes from untrusted server 'web', whose annotations cannot relax a decision; a human decides.",
    )


def test_trust_can_come_from_the_policy_instead_of_the_config() -> None:
    spec = tool(server="web", trusted=False)
    assert decide(Policy(trusted_servers=frozenset({"web"})), spec, {}).rule_id == "default:read_only"


def test_a_users_allow_rule_still_allows_an_untrusted_tool() -> None:
    decision = decide(Policy(rules=(allow(server="web"),)), tool(server="web", trusted=False), {})
    assert (decision.action, decision.rule_id) == ("allow", "rule:allow-it")


@pytest.mark.parametrize(("policy", "rule_id"), [
    (Policy(unattended=True), "default:destructive"),
    (Policy(unattended=True, rules=(ask(reason="check first"),)), "rule:ask-it"),
])
def test_unattended_turns_every_ask_into_deny_naming_the_asker(policy: Policy, rule_id: str) -> None:
    decision = decide(policy, tool("write_file", DESTRUCTIVE), {})
    assert (decision.action, decision.rule_id) == ("deny", "unattended")
    assert decision.reason.startswith(f"workspace__write_file needs a human decision ({rule_id}: ")
    assert decision.reason.endswith("but the run is unattended, so it is denied. Use a read-only tool or finish without this step.")


def test_unattended_leaves_allow_and_deny_alone() -> None:
    policy = Policy(unattended=True, rules=(deny(tool="delete_*"),))
    assert decide(policy, tool(), {}).action == "allow"
    assert decide(policy, tool("delete_file", DESTRUCTIVE), {}).rule_id == "rule:deny-it"


@pytest.mark.parametrize(("arguments", "action"), [
    ({"path": "secrets/key.pem"}, "deny"),
    ({"path": "src/secrets/key.pem"}, "allow"),   # a glob sees the raw string, not the resolved file
    ({"path": "src/main.py"}, "allow"),
    ({}, "allow"),                                 # a missing argument never matches
    ({"path": ["a.txt", "secrets/x"]}, "deny"),   # a list matches when any element does
    ({"path": 3}, "allow"),
])
def test_argument_globs(arguments: dict[str, Any], action: str) -> None:
    policy = Policy(rules=(deny(arguments={"path": "secrets/*"}, reason="no secrets"),))
    assert decide(policy, tool(), arguments).action == action


def test_all_argument_globs_of_a_rule_must_match() -> None:
    rule = ask(arguments={"to": "*@external.test", "priority": "high"})
    policy = Policy(rules=(rule,))
    assert decide(policy, tool(), {"to": "a@external.test", "priority": "high"}).action == "ask"
    assert decide(policy, tool(), {"to": "a@external.test", "priority": "low"}).action == "allow"


def test_numbers_and_booleans_match_their_json_text() -> None:
    policy = Policy(rules=(deny(arguments={"force": "true"}),))
    assert decide(policy, tool(), {"force": True}).action == "deny"
    assert decide(policy, tool(), {"force": False}).action == "allow"


def test_coding_assistant_preset_follows_seed_001(tmp_path: Path) -> None:
    """Workspace writes and sandbox runs go without approval; deletes ask; secrets are denied."""
    policy = Policy(profile="coding_assistant")
    cases = {
        ("workspace", "write_file", DESTRUCTIVE, "secrets/x"): ("deny", "rule:coding_assistant.secrets"),
        ("workspace", "write_file", DESTRUCTIVE, "src/a.py"): ("allow", "rule:coding_assistant.write"),
        ("workspace", "edit_file", DESTRUCTIVE, "src/a.py"): ("allow", "rule:coding_assistant.edit"),
        ("workspace", "delete_file", DESTRUCTIVE, "src/a.py"): ("ask", "rule:coding_assistant.delete"),
        ("workspace", "move_file", DESTRUCTIVE, "src/a.py"): ("ask", "rule:coding_assistant.move"),
        ("sandbox", "run_tests", UNANNOTATED, "."): ("allow", "rule:coding_assistant.sandbox"),
        ("git", "git_push", CLOSED_WRITE, "."): ("ask", "rule:coding_assistant.push"),
        ("workspace", "read_file", READ_ONLY, "src/a.py"): ("allow", "default:read_only"),
    }
    for (server, name, hints, path), expected in cases.items():
        spec = replace(tool(name, hints, server=server), root=str(tmp_path))
        reached = resolve(spec, {"path": path}, policy.path_patterns(spec))
        decision = decide(policy, spec, {"path": path}, reached)
        assert (decision.action, decision.rule_id) == expected, (server, name, path)


@pytest.mark.parametrize(("profile", "server", "name", "action", "rule_id"), [
    ("research_assistant", "memory", "create_entities", "ask", "rule:research_assistant.memory_create"),
    ("research_assistant", "memory", "read_graph", "allow", "default:read_only"),
    ("support_agent", "crm", "send_reply", "ask", "rule:support_agent.send"),
    ("procurement_agent", "records", "delete_vendor", "deny", "rule:procurement_agent.delete"),
    ("procurement_agent", "records", "search_vendors", "allow", "default:read_only"),
    ("sre_agent", "ops", "restart_service", "ask", "rule:sre_agent.restart"),
    ("sre_agent", "ops", "drop_table", "deny", "rule:sre_agent.drop"),
])
def test_profile_presets(profile: str, server: str, name: str, action: str, rule_id: str) -> None:
    hints = READ_ONLY if action == "allow" else CLOSED_WRITE
    decision = decide(Policy(profile=profile), tool(name, hints, server=server), {})
    assert (decision.action, decision.rule_id) == (action, rule_id)


def test_a_profile_ask_beats_a_user_allow() -> None:
    """A user cannot silently loosen a preset's ask with a broad allow: ask outranks allow."""
    policy = Policy(profile="research_assistant", rules=(allow(server="memory"),))
    assert decide(policy, tool("create_entities", CLOSED_WRITE, server="memory"), {}).action == "ask"


def test_every_preset_rule_id_is_unique_and_prefixed_by_its_profile() -> None:
    ids = [rule.id for rules in PROFILE_RULES.values() for rule in rules]
    assert len(ids) == len(set(ids))
    assert all(rule.id.startswith(f"{name}.") and rule.reason for name, rules in PROFILE_RULES.items() for rule in rules)


def test_version_hash_is_stable_and_tracks_every_change() -> None:
    base = Policy(rules=(deny(tool="delete_*"),), trusted_servers=frozenset({"a", "b"}))
    same = Policy(rules=(deny(tool="delete_*"),), trusted_servers=frozenset({"b", "a"}))
    assert base.version_hash() == same.version_hash()
    assert len(base.version_hash()) == 64
    changed = [
        Policy(rules=(deny(tool="delete_*", reason="why"),), trusted_servers=frozenset({"a", "b"})),
        Policy(rules=(ask(tool="delete_*"),), trusted_servers=frozenset({"a", "b"})),
        Policy(rules=(deny(tool="delete_*"),), trusted_servers=frozenset({"a"})),
        Policy(rules=(deny(tool="delete_*"),), trusted_servers=frozenset({"a", "b"}), unattended=True),
        Policy(rules=(deny(tool="delete_*"),), trusted_servers=frozenset({"a", "b"}), profile="sre_agent"),
    ]
    assert len({base.version_hash(), *(policy.version_hash() for policy in changed)}) == 1 + len(changed)


def test_load_policy_reads_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"profile": "coding_assistant", "unattended": true, "trusted_servers": ["workspace"],'
                    ' "rules": [{"id": "no-env", "action": "deny", "arguments": {"path": "*.env"}}]}')
    policy = load_policy(path)
    assert policy.unattended and policy.trusted_servers == frozenset({"workspace"})
    assert decide(policy, tool(), {"path": "prod.env"}).rule_id == "rule:no-env"


@pytest.mark.parametrize(("document", "message"), [
    ({"rules": [{"id": "x", "action": "block"}]},
     "policy file: rules[0].action: Input should be 'allow', 'ask' or 'deny' (got 'block')."),
    ({"rules": [{"action": "deny"}]},
     "policy file: rules[0].id: Field required (got {'action': 'deny'})."),
    ({"rules": [{"id": "x", "action": "deny", "args": {}}]},
     "policy file: rules[0].args: Extra inputs are not permitted (got {})."),
    ({"profile": "pirate"},
     "policy file: profile: unknown profile 'pirate'; choose one of research_assistant, coding_assistant, "
     "support_agent, procurement_agent, sre_agent or leave it out (got 'pirate')."),
    ({"rules": [{"id": "x", "action": "deny", "arguments": {"n": 3}}]},
     "policy file: rules[0].arguments.n: Input should be a valid string (got 3)."),
    ({"rules": [{"id": "x", "action": "deny", "paths": ["secrets/\x00"]}]},
     "policy file: rules[0].paths[0]: a glob cannot hold a NUL byte; remove it (got 'secrets/\\x00')."),
])
def test_load_policy_errors_name_the_place_value_and_fix(document: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(document)
    assert str(info.value) == message


def test_load_policy_bad_json_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"rules": [}')
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path} line 1 column 12: ")


def _files(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "docs").symlink_to(tmp_path / "secrets")
    return tmp_path


def _decide(policy: Policy, spec: ToolSpec, arguments: dict[str, Any]) -> Decision:
    return decide(policy, spec, arguments, resolve(spec, arguments, policy.path_patterns(spec)))


MOVE_SCHEMA = {"type": "object", "properties": {"source": {"type": "string"}, "destination": {"type": "string"}}}


@pytest.mark.parametrize(("arguments", "action"), [
    ({"source": "src/a.py", "destination": "src/b.py"}, "allow"),
    ({"source": "src/a.py", "destination": "elsewhere/b.py"}, "ask"),   # one end outside: the allow does not hold
    ({"source": "src/a.py", "destination": "docs/b.py"}, "ask"),        # through a symlink, outside src/
    ({"source": "src", "destination": "src2"}, "ask"),                   # src2 is not under src/
])
def test_an_allow_rule_holds_only_when_every_path_is_inside_it(tmp_path: Path, arguments: dict[str, Any], action: str) -> None:
    root = _files(tmp_path)
    spec = replace(tool("move_file", DESTRUCTIVE), input_schema=MOVE_SCHEMA, root=str(root))
    policy = Policy(rules=(allow(paths=("src/**",)),))
    assert _decide(policy, spec, arguments).action == action


def test_path_rules_fail_closed_where_the_root_is_unknown(tmp_path: Path) -> None:
    """No root: a deny on a path glob denies every path, and an allow on one allows none."""
    spec = tool("write_file", DESTRUCTIVE)  # no root
    assert _decide(Policy(rules=(deny(paths=("secrets/**",)),)), spec, {"path": "src/a.py"}).action == "deny"
    assert _decide(Policy(rules=(allow(paths=("**",)),)), spec, {"path": "src/a.py"}).action == "ask"
    reason = _decide(Policy(rules=(deny(paths=("secrets/**",), reason="no"),)), spec, {"path": "a"}).reason
    assert reason == "no (" + NO_ROOT.format(raw="a") + ")"
    assert 'declare "root"' in reason


def test_a_deny_on_a_tree_reaches_its_existing_parents_only(tmp_path: Path) -> None:
    root = _files(tmp_path)
    spec = replace(tool("list_files"), root=str(root))
    policy = Policy(rules=(deny(paths=("secrets/**",)), deny(id="gone", paths=("nothere/**",))))
    assert _decide(policy, spec, {"path": "."}).rule_id == "rule:deny-it"    # holds secrets/
    assert _decide(policy, spec, {"path": "src"}).action == "allow"            # beside it
    assert _decide(Policy(rules=(deny(paths=("nothere/**",)),)), spec, {"path": "."}).action == "allow"  # nothing to reach


@pytest.mark.parametrize(("argv", "under_deny", "under_allow"), [
    (["ls"], "deny", "allow"),
    (["/bin/ls", "-l"], "deny", "allow"),
    (["./ls"], "deny", "ask"),                  # relative: cannot be known here, fails closed both ways
    (["no-such-program-here"], "deny", "ask"),
    (["echo"], "ask", "ask"),                   # neither rule: the default for a write
])
def test_command_globs_see_the_resolved_program(tmp_path: Path, argv: list[str], under_deny: str, under_allow: str) -> None:
    schema = {"type": "object", "properties": {"argv": {"type": "array", MARK: "command"}}}
    spec = replace(tool("run_command", CLOSED_WRITE, server="sandbox"), input_schema=schema, root=str(tmp_path))
    assert _decide(Policy(rules=(deny(commands=("ls",)),)), spec, {"argv": argv}).action == under_deny
    assert _decide(Policy(rules=(allow(commands=("ls",)),)), spec, {"argv": argv}).action == under_allow
