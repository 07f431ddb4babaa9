"""policy: the permission decision for one proposed tool call (allow, ask or deny).

Owns the rule model, the precedence, the defaults drawn from MCP annotations, annotation trust,
unattended mode, the risk-profile presets and the policy's version hash. Never
runs, approves or records anything: it returns a `Decision` that names the rule behind it.

Precedence: across *all* matching rules (the user's and the profile's), deny > ask > allow;
only when no rule matches does the default apply. Within one action the first matching rule
(user rules first, then the profile's) is the one named.

Defaults, from the tool's hints, only for a *trusted* server (`trusted: true` in the server
config, or listed in `Policy.trusted_servers`):
    read-only                          → allow  `default:read_only`   (open-world reads included:
                                                 a web fetch reads; add a rule to ask per URL)
    destructive (announced)            → ask    `default:destructive`
    no annotations at all              → ask    `default:unannotated` (spec defaults: may destroy)
    open-world write, not destructive  → ask    `default:open_world`
    closed-world, non-destructive write→ ask    `default:write`       (a write is a side effect;
                                                 only a rule may allow it without a human)
For an *untrusted* server the hints are claims we cannot check, and a claim may only make a
decision stricter. Nothing is stricter than ask by default and a read-only claim cannot relax
it, so every tool of an untrusted server defaults to ask `default:untrusted`. Rules the user
wrote still apply: an explicit allow rule allows an untrusted tool.

Unattended mode turns every ask (from a rule or a default) into deny `unattended`, naming the
rule that asked in the reason. Rules match server and tool by glob (`fnmatch`, case-sensitive),
and optionally what the call reaches, resolved by `boundloop.tools.resources` before the decision:
- `paths`: globs over real paths (relative ones are taken from the server's root; `*` crosses
  `/`; `dir/**` names `dir` and everything below it); a path whose '..' reads differently by name
  than through its symlinks reaches both places;
- `collections`: globs over record collections; `commands`: globs over the program a call starts;
- `arguments`: globs over raw argument values (a list matches when any element does; numbers and
  booleans match their JSON text). They see the text as written: use `paths` for paths.
A deny rule's `paths` also see the call's *mentions*: any string of its arguments that resolves to
an existing place under a server's known root, whatever its name (so an argument nobody declared
as a path still cannot reach a denied file).
Every field a rule names must match. A deny or ask rule matches when *any* resource the call
reaches does (a directory reaches what lies below it, so listing or moving a parent of a denied
tree is denied; an unresolved path reaches everything); an allow rule only when *every* resource
of that kind is itself named by the rule. Stricter actions match broadly, the relaxing one narrowly.
The decision is pure: it reads the resolved resources and never touches the filesystem.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from boundloop.tools import resources as found
from boundloop.tools.config import read_json_object
from boundloop.tools.errors import PolicyError
from boundloop.tools.registry import ToolSpec
from boundloop.tools.resources import Resources

Action = Literal["allow", "ask", "deny"]


def _no_nul(glob: str) -> str:
    if "\0" in glob:
        raise ValueError("a glob cannot hold a NUL byte; remove it")
    return glob


Glob = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]
_STRENGTH: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}

# Reasons the model (deny) or the approver (ask) reads.
REASON_READ_ONLY = "{tool} is read-only (trusted annotation)."
REASON_DESTRUCTIVE = "{tool} may destroy data (destructive annotation); a human decides."
REASON_UNANNOTATED = "{tool} has no annotations, so it may write and destroy; a human decides."
REASON_OPEN_WORLD = "{tool} writes to the outside world (open-world annotation); a human decides."
REASON_WRITE = "{tool} changes state; writes need a human unless a rule allows them."
REASON_UNTRUSTED = "{tool} comes from untrusted server {server!r}, whose annotations cannot relax a decision; a human decides."
REASON_REACHES = "{reason} ({what})"
NO_ROOT = (
    "the server's root is unknown, so path {raw!r} cannot be checked against the path rules, which fail closed; "
    "declare \"root\" (the absolute directory it serves) for this server in the servers file"
)
REASON_UNATTENDED = "{tool} needs a human decision ({rule_id}: {reason}) but the run is unattended, so it is denied. Use a read-only tool or finish without this step."


class Rule(BaseModel):
    """One user or profile rule: when server, tool, arguments and what the call reaches match, it votes `action`."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    action: Action
    server: str = "*"
    """Glob over the server's config name."""
    tool: str = "*"
    """Glob over the tool's name on its server (not the qualified name)."""
    arguments: dict[str, str] = Field(default_factory=dict)
    """Argument name → glob over its raw value; all must match. A missing argument never matches."""
    paths: tuple[Glob, ...] = ()
    """Globs over the real paths the call reaches, e.g. `secrets/**` (relative: from the server's root)."""
    collections: tuple[Glob, ...] = ()
    """Globs over the record collections the call reaches, e.g. `payroll*`."""
    commands: tuple[Glob, ...] = ()
    """Globs over the program the call starts: its name (`curl`), or its real path when the glob has a `/`."""
    id: str = Field(min_length=1)
    """Named in every decision this rule makes (`rule:<id>`)."""
    reason: str = ""
    """Why the rule exists; shown to the model on deny and to the approver on ask."""

    def applies_to(self, spec: ToolSpec) -> bool:
        return fnmatchcase(spec.server, self.server) and fnmatchcase(spec.name, self.tool)

    def match(self, spec: ToolSpec, arguments: Mapping[str, Any], reached: Resources) -> str | None:
        """None when the rule does not match; otherwise what it matched ("" when only names and arguments)."""
        if not self.applies_to(spec):
            return None
        if not all(_value_matches(arguments.get(name), pattern) for name, pattern in self.arguments.items()):
            return None
        evidence = []
        for check in (self._paths, self._collections, self._commands):
            what = check(reached)
            if what is None:
                return None
            evidence.append(what)
        return "; ".join(filter(None, evidence))

    def _paths(self, reached: Resources) -> str | None:
        if not self.paths:
            return ""
        patterns = [reached.patterns.get(glob) for glob in self.paths]
        if self.action == "allow":
            ok = bool(reached.paths) and all(any(found.within(path, p) for p in patterns) for path in reached.paths)
            return "" if ok else None
        candidates = reached.paths + reached.mentioned if self.action == "deny" else reached.paths
        hit = next((path for path in candidates if any(found.reaches(path, p) for p in patterns)), None)
        if hit is None:
            return None
        if hit.real is None and reached.root is None:
            return NO_ROOT.format(raw=hit.raw)
        if hit.real is None:
            return f"path {hit.raw!r} cannot be resolved on this host, so path rules fail closed"
        return f"{hit.raw!r} reaches {found.shown(hit, reached.root)}"

    def _collections(self, reached: Resources) -> str | None:
        if not self.collections:
            return ""
        hits = [name for name in reached.collections if any(fnmatchcase(name, glob) for glob in self.collections)]
        if self.action == "allow":
            return "" if reached.collections and len(hits) == len(reached.collections) else None
        return f"collection {hits[0]!r}" if hits else None

    def _commands(self, reached: Resources) -> str | None:
        if not self.commands:
            return ""
        strict = self.action == "allow"
        hits = [c for c in reached.commands if any(found.command_matches(c, glob, strict=strict) for glob in self.commands)]
        if strict:
            return "" if reached.commands and len(hits) == len(reached.commands) else None
        return f"command {hits[0].raw!r}" if hits else None


class Policy(BaseModel):
    """The autonomy boundary of a run: rules, trusted servers, unattended mode, risk profile."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    rules: tuple[Rule, ...] = ()
    """The user's rules; the profile's rules are added after them."""
    trusted_servers: frozenset[str] = frozenset()
    """Config names of servers whose annotations may relax a decision (besides `trusted: true` in the config)."""
    unattended: bool = False
    """No human is available: every ask becomes deny."""
    profile: str | None = None
    """A key of `PROFILE_RULES`, or None for no preset."""

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | None) -> str | None:
        if value is not None and value not in PROFILE_RULES:
            raise ValueError(f"unknown profile {value!r}; choose one of {', '.join(PROFILE_RULES)} or leave it out")
        return value

    def effective_rules(self) -> tuple[Rule, ...]:
        return self.rules + tuple(PROFILE_RULES.get(self.profile or "", ()))

    def path_patterns(self, spec: ToolSpec) -> tuple[str, ...]:
        """The path globs of every rule that applies to `spec`: what resolution must resolve for it."""
        return tuple(dict.fromkeys(glob for rule in self.effective_rules() if rule.applies_to(spec) for glob in rule.paths))

    def trusts(self, spec: ToolSpec) -> ToolSpec:
        """`spec` as the gateway relies on it: trusted when its config or this policy trusts its server."""
        return spec.trusting() if spec.server in self.trusted_servers else spec

    def version_hash(self) -> str:
        """SHA-256 of the canonical JSON of the policy, with the profile's rules expanded, so a
        change to a preset changes the hash of every policy that uses it."""
        document = {
            "rules": [rule.model_dump(mode="json") for rule in self.effective_rules()],
            "trusted_servers": sorted(self.trusted_servers),
            "unattended": self.unattended,
            "profile": self.profile,
        }
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Decision:
    """What the gate does with a call, and which rule said so."""

    action: Action
    rule_id: str
    """`rule:<id>`, `default:<kind>` or `unattended`."""
    reason: str


def decide(policy: Policy, spec: ToolSpec, arguments: Mapping[str, Any], reached: Resources | None = None) -> Decision:
    """The decision for calling `spec` with `arguments` under `policy` (see the module docstring).

    `reached` comes from `boundloop.tools.resources.resolve`; without it every path counts as unresolved."""
    spec = policy.trusts(spec)
    reached = found.unresolved(spec, arguments) if reached is None else reached
    decision = _by_rules(policy, spec, arguments, reached) or _by_default(policy, spec)
    if decision.action == "ask" and policy.unattended:
        reason = REASON_UNATTENDED.format(tool=spec.qualified_name, rule_id=decision.rule_id, reason=decision.reason)
        return Decision("deny", "unattended", reason)
    return decision


def load_policy(source: str | Path | Mapping[str, Any]) -> Policy:
    """Read a policy from a JSON file path or a dict:
    `{"profile": "coding_assistant", "unattended": false, "trusted_servers": ["workspace"],
      "rules": [{"id": "no-secrets", "action": "deny", "paths": ["secrets/**"]}]}`.
    Raises PolicyError listing every problem, each with where, the value and the fix."""
    document, label = read_json_object(source, "policy file", PolicyError)
    try:
        return Policy.model_validate(document)
    except ValidationError as exc:
        raise PolicyError("\n".join(_describe(label, error) for error in exc.errors())) from None


def _by_rules(policy: Policy, spec: ToolSpec, arguments: Mapping[str, Any], reached: Resources) -> Decision | None:
    strongest: tuple[Rule, str] | None = None
    for rule in policy.effective_rules():
        if strongest is not None and _STRENGTH[rule.action] <= _STRENGTH[strongest[0].action]:
            continue
        evidence = rule.match(spec, arguments, reached)
        if evidence is not None:
            strongest = (rule, evidence)
    if strongest is None:
        return None
    rule, evidence = strongest
    reason = rule.reason or f"rule {rule.id!r} matched"
    return Decision(rule.action, f"rule:{rule.id}", REASON_REACHES.format(reason=reason, what=evidence) if evidence else reason)


def _by_default(policy: Policy, spec: ToolSpec) -> Decision:
    tool, hints = spec.qualified_name, spec.hints
    if not spec.trusted:
        return Decision("ask", "default:untrusted", REASON_UNTRUSTED.format(tool=tool, server=spec.server))
    if hints.read_only:
        return Decision("allow", "default:read_only", REASON_READ_ONLY.format(tool=tool))
    if not hints.annotated:
        return Decision("ask", "default:unannotated", REASON_UNANNOTATED.format(tool=tool))
    if hints.destructive:
        return Decision("ask", "default:destructive", REASON_DESTRUCTIVE.format(tool=tool))
    if hints.open_world:
        return Decision("ask", "default:open_world", REASON_OPEN_WORLD.format(tool=tool))
    return Decision("ask", "default:write", REASON_WRITE.format(tool=tool))


def _value_matches(value: Any, pattern: str) -> bool:
    if isinstance(value, list):
        return any(_value_matches(item, pattern) for item in value)
    if isinstance(value, str):
        return fnmatchcase(value, pattern)
    if isinstance(value, (bool, int, float)):
        return fnmatchcase(json.dumps(value), pattern)
    return False


def _describe(label: str, error: Any) -> str:
    loc = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    got = repr(error["input"])
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{label}: {loc or 'policy'}: {message} (got {got})."


# Risk-profile presets. Small on purpose: the defaults above
# already allow trusted reads and ask for every write, so a preset only names what its row
# lets run without a human (allow) or always wants one for (ask), and its fail-closed cases
# (deny). Server names are the config names of the servers we ship or expect: `workspace`
# (files inside the run's workspace), `sandbox` (commands in a sandbox), `memory` (persistent
# memory, tool names as in @modelcontextprotocol/server-memory). Rule ids are `<profile>.<what>`.
PROFILE_RULES: dict[str, list[Rule]] = {
    # High read-only autonomy: reads run (defaults); persistent memory writes always ask,
    # even where a user rule would allow them.
    "research_assistant": [
        Rule(action="ask", server="memory", tool="create_*", id="research_assistant.memory_create",
             reason="Persistent memory writes need approval (research assistant)."),
        Rule(action="ask", server="memory", tool="add_*", id="research_assistant.memory_add",
             reason="Persistent memory writes need approval (research assistant)."),
        Rule(action="ask", server="memory", tool="delete_*", id="research_assistant.memory_delete",
             reason="Persistent memory writes need approval (research assistant)."),
    ],
    # Bounded workspace autonomy: read and write files in the workspace, run tests in the
    # sandbox; destructive file operations and pushes ask; secrets are never touched.
    "coding_assistant": [
        Rule(action="allow", server="workspace", tool="write_file", id="coding_assistant.write",
             reason="Writing draft files inside the workspace is permitted (coding assistant)."),
        Rule(action="allow", server="workspace", tool="edit_file", id="coding_assistant.edit",
             reason="Editing files inside the workspace is permitted (coding assistant)."),
        Rule(action="ask", server="workspace", tool="delete_*", id="coding_assistant.delete",
             reason="Destructive file operations need approval (coding assistant)."),
        Rule(action="ask", server="workspace", tool="move_*", id="coding_assistant.move",
             reason="Moving files can destroy data; it needs approval (coding assistant)."),
        Rule(action="allow", server="sandbox", tool="*", id="coding_assistant.sandbox",
             reason="Running tests in the sandbox is permitted (coding assistant)."),
        Rule(action="ask", server="*", tool="*push*", id="coding_assistant.push",
             reason="Pushes and deployments need approval (coding assistant)."),
        Rule(action="deny", server="*", tool="*", paths=("secrets/**",), id="coding_assistant.secrets",
             reason="Files under secrets/ are off limits (secret exposure fails closed)."),
    ],
    # Bounded action autonomy: searching and drafting run; sends, refunds, cancellations ask.
    "support_agent": [
        Rule(action="ask", server="*", tool="send_*", id="support_agent.send",
             reason="Sending to a customer needs approval (support agent)."),
        Rule(action="ask", server="*", tool="*refund*", id="support_agent.refund",
             reason="Refunds need approval (support agent)."),
        Rule(action="ask", server="*", tool="cancel_*", id="support_agent.cancel",
             reason="Cancellations need approval (support agent)."),
    ],
    # Low mutation autonomy: comparing and extracting run; purchases ask; records are never deleted.
    "procurement_agent": [
        Rule(action="ask", server="*", tool="*purchase*", id="procurement_agent.purchase",
             reason="Purchase orders need approval (procurement agent)."),
        Rule(action="ask", server="*", tool="*payment*", id="procurement_agent.payment",
             reason="Payments need approval (procurement agent)."),
        Rule(action="deny", server="*", tool="delete_*", id="procurement_agent.delete",
             reason="Procurement records are never deleted by the agent."),
    ],
    # High diagnostic, low mutation autonomy: queries run; restarts, rollbacks, config and scale
    # changes ask; deletions and drops fail closed.
    "sre_agent": [
        Rule(action="ask", server="*", tool="restart_*", id="sre_agent.restart",
             reason="Restarts need operator approval (SRE agent)."),
        Rule(action="ask", server="*", tool="*rollback*", id="sre_agent.rollback",
             reason="Production rollback needs operator approval (SRE agent)."),
        Rule(action="ask", server="*", tool="scale_*", id="sre_agent.scale",
             reason="Traffic and capacity changes need operator approval (SRE agent)."),
        Rule(action="deny", server="*", tool="delete_*", id="sre_agent.delete",
             reason="Destructive production actions fail closed (SRE agent)."),
        Rule(action="deny", server="*", tool="drop_*", id="sre_agent.drop",
             reason="Destructive production actions fail closed (SRE agent)."),
    ],
}
