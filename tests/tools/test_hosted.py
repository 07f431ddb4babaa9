"""Hosted tool declarations: every problem reported with its fix, and the policy's offering decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from boundloop.graph.task import RunSettings
from boundloop.tools import hosted
from boundloop.tools.errors import ConfigError
from boundloop.tools.policy import Policy

DOCS = {"type": "mcp", "server_url": "https://mcp.example.test/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}


def _offers(entries: dict, **policy: object) -> dict[str, dict]:
    offered = hosted.offering(hosted.load({"hostedTools": entries}), Policy.model_validate({"profile": "coding_assistant", **policy}))
    return {entry["name"]: entry for entry in offered}


def test_every_problem_of_a_declaration_is_reported_together_with_its_fix():
    with pytest.raises(ConfigError) as raised:
        hosted.load({"hostedTools": {
            "bad name": {"type": "web_search"},
            "shell": {"type": "local_shell"},
            "docs": {**DOCS, "require_approval": "never"},
            "calc": {"type": "code_interpreter", "trusted": True},
            "kb": {"type": "mcp"},
            "search": {"type": "web_search"}, "search2": {"type": "web_search_preview"},
        }})
    assert str(raised.value).splitlines() == [
        "hosted tools config: hostedTools.bad name: name 'bad name' is not usable as a tool-name prefix. Use letters, digits, '_' and '-' only, without '__'.",
        "hosted tools config: hostedTools.shell: type 'local_shell' is not a hosted tool; use one of web_search, web_search_preview, file_search, "
        "code_interpreter, mcp.",
        "hosted tools config: hostedTools.docs: 'require_approval' is set by boundloop from the policy; remove it and write a policy rule "
        "(server 'docs') instead.",
        "hosted tools config: hostedTools.calc: 'trusted', 'tools' and 'read_only_tools' apply only to a connector (type 'mcp').",
        "hosted tools config: hostedTools.kb: a connector needs 'server_url' (or a provider 'connector_id').",
        "hosted tools config: hostedTools.search2: a second web_search (first: 'search'); declare each built-in once.",
    ]


def test_a_missing_file_and_a_wrong_top_level_say_what_to_write(tmp_path: Path):
    with pytest.raises(ConfigError, match="hosted tools config not found: .*nothing.json. Create the file"):
        hosted.load(str(tmp_path / "nothing.json"))
    (tmp_path / "hosted.json").write_text(json.dumps({"hostedTools": []}))
    with pytest.raises(ConfigError, match=r"'hostedTools' must be an object of named hosted tools \(got list\)"):
        hosted.load(str(tmp_path / "hosted.json"))


def test_settings_refuse_a_literal_connector_secret_and_a_negative_price():
    with pytest.raises(ValidationError, match="hostedTools.docs.headers.Authorization is a literal value"):
        RunSettings(hosted_tools={"hostedTools": {"docs": {**DOCS, "headers": {"Authorization": "Bearer sk-live-123456"}}}})
    with pytest.raises(ValidationError, match=r"tool_prices\['web_search_call'\] is not a price"):
        RunSettings(tool_prices={"web_search_call": -1.0})
    with pytest.raises(ValidationError, match="tool_prices"):
        RunSettings(tool_prices={"web_search_call": float("nan")})


def test_search_is_offered_the_interpreter_only_by_a_rule_and_a_deny_removes_a_tool():
    offers = _offers({"search": {"type": "web_search"}, "calc": {"type": "code_interpreter"}})
    assert (offers["search"]["offered"], offers["search"]["rule"]) == (True, "default:read_only")
    assert (offers["calc"]["offered"], offers["calc"]["decision"]) == (False, "ask")
    assert offers["calc"]["reason"].startswith("code_interpreter needs a human decision (default:write: ")
    allowed = _offers({"calc": {"type": "code_interpreter"}}, rules=[{"id": "calc", "action": "allow", "server": "calc"}])
    assert allowed["calc"]["offered"] and allowed["calc"]["tool"] == {"type": "code_interpreter"}
    denied = _offers({"search": {"type": "web_search"}}, rules=[{"id": "no-web", "action": "deny", "server": "search"}])
    assert (denied["search"]["offered"], denied["search"]["rule"]) == (False, "rule:no-web")


def test_a_connector_with_listed_tools_gets_allowed_tools_and_approval_per_tool_from_the_policy():
    docs = {**DOCS, "trusted": True, "tools": ["search_docs", "create_issue", "delete_repo"], "read_only_tools": ["search_docs"]}
    offers = _offers({"docs": docs}, rules=[{"id": "no-delete", "action": "deny", "server": "docs", "tool": "delete_*"}])
    tool = offers["docs"]["tool"]
    assert tool["allowed_tools"] == ["search_docs", "create_issue"]
    assert tool["require_approval"] == {"never": {"tool_names": ["search_docs"]}, "always": {"tool_names": ["create_issue"]}}
    assert tool["headers"] == {"Authorization": "Bearer ${DOCS_TOKEN}"}  # expanded only when a request is built
    assert hosted.provider_tools([offers["docs"]], {"DOCS_TOKEN": "t0ken-value"})[0]["headers"] == {"Authorization": "Bearer t0ken-value"}
    with pytest.raises(ConfigError, match=r"hostedTools.docs.headers.Authorization: \$\{DOCS_TOKEN\} is not set"):
        hosted.provider_tools([offers["docs"]], {})


def test_an_untrusted_connector_read_only_claim_relaxes_nothing():
    docs = {**DOCS, "tools": ["search_docs"], "read_only_tools": ["search_docs"]}
    offers = _offers({"docs": docs})
    assert offers["docs"]["tool"]["require_approval"] == {"always": {"tool_names": ["search_docs"]}}
    assert hosted.from_offer(offers["docs"]).has_side_effect("search_docs")
