"""hosted: provider-hosted tools declared for a run, and which of them the policy lets be offered.

Owns the `hostedTools` declaration (named entries, like `mcpServers`), its validation, each hosted
tool's policy identity — a `ToolSpec` whose server is the entry's name and whose tool is the
built-in's type (`web_search`) or the connector tool's name — and the offering decision, made once
at intake and kept in the run's boundary. Never sends a request and never observes a call
(graph/calls/hosted.py does both).

    {"hostedTools": {
        "search": {"type": "web_search"},
        "calc":   {"type": "code_interpreter", "container": {"type": "auto"}},
        "kb":     {"type": "file_search", "vector_store_ids": ["vs_123"]},
        "docs":   {"type": "mcp", "server_url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                   "tools": ["search_docs", "create_issue"], "read_only_tools": ["search_docs"], "trusted": true}}}

Provider keys pass through as written. Ours: `trusted` (a connector's `read_only_tools` relax the
policy only when trusted), `tools` (connector tools decided one by one when offered),
`read_only_tools` (connector tools without side effects). `server_label` is the entry's name;
`require_approval` and `allowed_tools` are set from the policy, so a declaration may not set them.
`headers` and `authorization` values must be `${VAR}` references (settings are checkpointed); they
are expanded only when a request is built.

Offering, from the policy's decision on each hosted tool with no arguments:
    built-in (web_search, file_search, code_interpreter)
        allow → offered;  deny → not offered;
        ask   → not offered: the provider runs it without asking, so nobody could approve a call
    connector (`type: mcp`)
        `tools` listed: deny → left out of `allowed_tools`; allow → `require_approval` never;
                        ask → `require_approval` always (each request becomes our approval)
        none listed:    `require_approval` always, every request decided at the gate; not offered
                        when a rule denies all its tools (a deny whose tool glob matches `*`)
Built-in hints are ours, not the provider's: web and file search read, code interpreter writes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from boundloop.tools import policy as policies
from boundloop.tools.config import SERVER_NAME, read_json_object
from boundloop.tools.errors import ConfigError
from boundloop.tools.registry import ToolHints, ToolSpec

BUILT_INS: dict[str, ToolHints] = {
    "web_search": ToolHints(read_only=True, destructive=False, idempotent=True, open_world=True),
    "web_search_preview": ToolHints(read_only=True, destructive=False, idempotent=True, open_world=True),
    "file_search": ToolHints(read_only=True, destructive=False, idempotent=True, open_world=False),
    "code_interpreter": ToolHints(read_only=False, destructive=False, idempotent=False, open_world=False),
}
"""What each built-in does, by our own account: search reads; the interpreter runs code that may write."""
CONNECTOR = "mcp"
ITEM_TYPES: dict[str, str] = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "mcp_call": CONNECTOR,
}
"""Provider output item → the declaration type that produced it."""
OURS = frozenset({"trusted", "tools", "read_only_tools"})
SET_BY_POLICY = frozenset({"require_approval", "allowed_tools", "server_label"})
SECRET_KEYS = ("headers", "authorization")
LITERAL = ("{where} is a literal value; what a run declares is checkpointed, so write it as a reference to an "
           "environment variable (e.g. \"Bearer ${{TOKEN}}\") and export that variable")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

NOT_OFFERED_ASK = (
    "{tool} needs a human decision ({rule}: {reason}) but the provider runs it without asking, so it is not "
    "offered. Allow it with a policy rule (server {server!r}, tool {name!r}) to offer it."
)


@dataclass(frozen=True)
class Hosted:
    """One validated `hostedTools` entry."""

    name: str
    type: str
    provider: dict[str, Any]
    """The provider's keys as declared (references unexpanded), without ours."""
    trusted: bool = False
    tools: tuple[str, ...] | None = None
    read_only_tools: frozenset[str] = frozenset()

    def spec(self, tool: str | None = None) -> ToolSpec:
        """The policy identity of this entry (a built-in), or of connector tool `tool`."""
        if self.type != CONNECTOR:
            return ToolSpec(server=self.name, name=self.type, description=f"provider-hosted {self.type}", input_schema={},
                            hints=BUILT_INS[self.type], trusted=True)
        read_only = tool in self.read_only_tools
        hints = ToolHints(read_only=True, destructive=False, idempotent=True, open_world=True) if read_only else ToolHints(annotated=False)
        return ToolSpec(server=self.name, name=tool or "*", description=f"provider-side MCP connector {self.name}", input_schema={},
                        hints=hints, trusted=self.trusted)

    def has_side_effect(self, tool: str | None) -> bool:
        """Whether a call may change something outside the conversation. A connector tool writes unless
        declared read-only by a trusted entry (an untrusted claim may not relax anything)."""
        if self.type != CONNECTOR:
            return not BUILT_INS[self.type].read_only
        return not (self.trusted and tool in self.read_only_tools)


def load(source: str | Mapping[str, Any] | None) -> dict[str, Hosted]:
    """The declared hosted tools of a run (`RunSettings.hosted_tools`: a file path or the document).
    Raises ConfigError listing every problem, each with its fix."""
    if not source:
        return {}
    document, label = read_json_object(source, "hosted tools config", ConfigError)
    if literal := literal_secrets(document):
        raise ConfigError(LITERAL.format(where=f"{label}: {literal[0]}"))
    entries = document.get("hostedTools")
    if not isinstance(entries, dict):
        raise ConfigError(f"{label}: 'hostedTools' must be an object of named hosted tools (got {type(entries).__name__}). "
                          'Write {"hostedTools": {"search": {"type": "web_search"}}}.')
    problems: list[str] = []
    declared = {name: hosted for name, entry in entries.items() if (hosted := _parse(name, entry, f"{label}: hostedTools.{name}", problems))}
    seen: dict[str, str] = {}
    for hosted in declared.values():
        family = "web_search" if hosted.type.startswith("web_search") else hosted.type
        if family != CONNECTOR and family in seen:
            problems.append(f"{label}: hostedTools.{hosted.name}: a second {family} (first: {seen[family]!r}); declare each built-in once.")
        seen.setdefault(family, hosted.name)
    if problems:
        raise ConfigError("\n".join(problems))
    return declared


def literal_secrets(source: str | Mapping[str, Any] | None) -> list[str]:
    """Where a `hostedTools` document, inline or in the file `source` names, holds a literal
    `headers`/`authorization` value (a file's places are prefixed with its path). A file that
    cannot be read holds none here: `load` reports it."""
    if isinstance(source, str):
        try:
            document, label = read_json_object(source, "hosted tools config", ConfigError)
        except ConfigError:
            return []
        return [f"{label}: {where}" for where in literal_secrets(document)]
    if not isinstance(source, Mapping) or not isinstance(source.get("hostedTools"), Mapping):
        return []
    found = []
    for name, entry in source["hostedTools"].items():
        if not isinstance(entry, Mapping):
            continue
        for key in SECRET_KEYS:
            value = entry.get(key)
            values = value.items() if isinstance(value, Mapping) else ([] if value is None else [(key, value)])
            found.extend(f"hostedTools.{name}.{key}" + (f".{item}" if isinstance(value, Mapping) else "")
                         for item, text in values if not (isinstance(text, str) and _VAR.search(text)))
    return found


def offering(declared: Mapping[str, Hosted], policy: policies.Policy) -> list[dict[str, Any]]:
    """Per entry: offered or not, the decision and rule behind it, and the provider tool to send
    (with `${VAR}` references unexpanded). JSON, kept in the run's boundary."""
    return [_offer(hosted, policy) for hosted in declared.values()]


def provider_tools(offered: list[dict[str, Any]], environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The tools to send with a request: the offered entries, references expanded now.
    Raises ConfigError when a referenced variable is not set."""
    env = os.environ if environ is None else environ
    tools = []
    for entry in offered:
        if entry["offered"]:
            tool = dict(entry["tool"])
            for key in SECRET_KEYS:
                if key in tool:
                    tool[key] = _expand(tool[key], env, f"hostedTools.{entry['name']}.{key}")
            tools.append(tool)
    return tools


def from_offer(record: Mapping[str, Any]) -> Hosted:
    """The entry an offering record (`offering`) was made for, as far as deciding its calls needs."""
    listed = record.get("tools")
    return Hosted(name=record["name"], type=record["type"], provider={}, trusted=record.get("trusted", False),
                  tools=None if listed is None else tuple(listed), read_only_tools=frozenset(record.get("read_only_tools", ())))


def _offer(hosted: Hosted, policy: policies.Policy) -> dict[str, Any]:
    record: dict[str, Any] = {"name": hosted.name, "type": hosted.type, "side_effect": hosted.has_side_effect(None),
                              "trusted": hosted.trusted, "read_only_tools": sorted(hosted.read_only_tools)}
    if hosted.type != CONNECTOR:
        decision = policies.decide(policy, hosted.spec(), {})
        offered = decision.action == "allow"
        reason = decision.reason if decision.action != "ask" else NOT_OFFERED_ASK.format(
            tool=hosted.type, rule=decision.rule_id, reason=decision.reason, server=hosted.name, name=hosted.type)
        return {**record, "offered": offered, "decision": decision.action, "rule": decision.rule_id, "reason": reason,
                "tool": {"type": hosted.type, **hosted.provider}}
    tool: dict[str, Any] = {"type": CONNECTOR, "server_label": hosted.name, **hosted.provider}
    if hosted.tools is None:
        decision = policies.decide(policy, hosted.spec(), {})
        tool["require_approval"] = "always"
        return {**record, "offered": decision.action != "deny", "decision": "ask" if decision.action != "deny" else "deny",
                "rule": decision.rule_id, "reason": decision.reason, "tool": tool, "tools": None}
    decisions = {name: policies.decide(policy, hosted.spec(name), {}) for name in hosted.tools}
    allowed = [name for name, decision in decisions.items() if decision.action == "allow"]
    asked = [name for name, decision in decisions.items() if decision.action == "ask"]
    tool["allowed_tools"] = allowed + asked
    tool["require_approval"] = {key: {"tool_names": names} for key, names in (("never", allowed), ("always", asked)) if names}
    per_tool = {name: {"decision": d.action, "rule": d.rule_id, "reason": d.reason} for name, d in decisions.items()}
    offered = bool(allowed or asked)
    return {**record, "offered": offered, "decision": "ask" if asked else ("allow" if allowed else "deny"),
            "rule": None, "reason": "per tool" if offered else "the policy denies every tool of this connector", "tool": tool, "tools": per_tool}


def _parse(name: str, entry: Any, where: str, problems: list[str]) -> Hosted | None:
    if not SERVER_NAME.fullmatch(name) or "__" in name:
        problems.append(f"{where}: name {name!r} is not usable as a tool-name prefix. Use letters, digits, '_' and '-' only, without '__'.")
        return None
    if not isinstance(entry, dict):
        problems.append(f"{where}: must be an object with a 'type' (got {type(entry).__name__}).")
        return None
    kind = entry.get("type")
    if kind not in (*BUILT_INS, CONNECTOR):
        problems.append(f"{where}: type {kind!r} is not a hosted tool; use one of {', '.join([*BUILT_INS, CONNECTOR])}.")
        return None
    if set_here := sorted(SET_BY_POLICY.intersection(entry)):
        problems.append(f"{where}: {', '.join(map(repr, set_here))} is set by boundloop from the policy; remove it and write a policy rule "
                        f"(server {name!r}) instead.")
        return None
    ours = {key: entry[key] for key in OURS if key in entry}
    if kind != CONNECTOR and ours:
        problems.append(f"{where}: 'trusted', 'tools' and 'read_only_tools' apply only to a connector (type 'mcp').")
        return None
    if kind == CONNECTOR and not (entry.get("server_url") or entry.get("connector_id")):
        problems.append(f"{where}: a connector needs 'server_url' (or a provider 'connector_id').")
        return None
    listed = ours.get("tools")
    read_only = ours.get("read_only_tools", [])
    if listed is not None and not _names(listed) or not _names(read_only) or not isinstance(ours.get("trusted", False), bool):
        problems.append(f"{where}: 'tools' and 'read_only_tools' must be lists of tool names and 'trusted' true or false.")
        return None
    provider = {key: value for key, value in entry.items() if key not in OURS and key != "type"}
    try:
        json.dumps(provider)
    except (TypeError, ValueError):
        problems.append(f"{where}: holds a value that is not JSON.")
        return None
    return Hosted(name=name, type=kind, provider=provider, trusted=ours.get("trusted", False),
                  tools=None if listed is None else tuple(listed), read_only_tools=frozenset(read_only))


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item for item in value)


def _expand(value: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(value, Mapping):
        return {key: _expand(item, environ, f"{where}.{key}") for key, item in value.items()}
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in environ:
            return environ[var]
        if default is not None:
            return default
        raise ConfigError(f"{where}: ${{{var}}} is not set. Export {var}, or write ${{{var}:-default}}.")

    return _VAR.sub(one, value)
