"""gateway: decide every proposed tool call before anything runs, then run the admitted ones.

Owns the order registry → arguments → resources → policy → authority → budget → breakers; the
dispatch waves (dependencies, then reads together and each write alone) are graph/schedule.py's.
It composes the stage modules and holds no logic of its own beyond that order. Resolving what a
call reaches touches the filesystem, so `admit_all` runs the stages in a worker thread.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from boundloop.graph.core.budget import Budget, add_usage, check_before_tool_call, tool_call_reservation
from boundloop.tools import arguments, authority, breakers, policy, resources, saga
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolRegistry, ToolSpec

UNKNOWN_TOOL = "unknown_tool: no tool {name!r}; available: {available}"
INVALID_ARGUMENTS = "invalid_arguments: {name}: {problems}. Fix the arguments and call again."
DENIED = "denied: {name} is not permitted ({rule}: {reason})."
OUT_OF_SCOPE = ("denied: {name} reaches {where}: " + authority.OUTSIDE + " ({rule}: the run has read untrusted output, "
                "from {source}, and is unattended). Stay within the task's targets.")
ASK_OUT_OF_SCOPE = authority.OUTSIDE + ": {name} reaches {where}, after the run read untrusted output from {source}."
BUDGET_EXCEEDED = "budget_exceeded: {message} The call was not made."


@dataclass
class ProposedCall:
    """A tool call as the model proposed it, with the gateway's stable id."""

    call_id: str
    tool_call_id: str
    name: str
    args: Any


@dataclass
class Admission:
    """The gate's verdict on one call: admit, ask a human, or a refusal code with its text."""

    verdict: Literal["admit", "ask", "unknown_tool", "invalid_arguments", "denied", "budget_exceeded", "circuit_open", "repeated_call"]
    call: dict[str, Any]
    message: str = ""
    exhaustion: Any = None
    reservation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scope:
    """What the authority stage compares a call with: the task's targets, and the call that tainted
    the run (None: nothing untrusted was read, so the stage lets every call through)."""

    targets: tuple[dict[str, str], ...]
    taint: dict[str, str] | None = None


def describe(call: ProposedCall, spec: ToolSpec | None) -> dict[str, Any]:
    """The JSON record of a call that travels through state (dispatch, approvals, observations).

    Its flags are what the gateway relies on (`spec.hints`): an untrusted server's tool is a
    non-idempotent side effect whatever it claims, so it takes the ledger, the write lock and the
    side-effect budget, and runs alone."""
    record: dict[str, Any] = {
        "call_id": call.call_id,
        "tool_call_id": call.tool_call_id,
        "name": call.name,
        "args": call.args,
        "args_hash": breakers.arguments_hash(call.args if isinstance(call.args, dict) else {"_": call.args}),
    }
    if spec is not None:
        record.update(
            server=spec.server,
            tool=spec.name,
            read_only=spec.hints.read_only,
            idempotent=spec.hints.idempotent,
            side_effect=not spec.hints.read_only,
            trusted=spec.trusted,
            reversibility=saga.reversibility(spec),
        )
    return record


def relied_spec(registry: ToolRegistry, call: dict[str, Any]) -> ToolSpec | None:
    """The spec a described call runs with: trusted exactly when the gate trusted it."""
    spec = registry.get(call["name"])
    return spec.trusting() if spec is not None and call.get("trusted") else spec


def permission(rules: policy.Policy, spec: ToolSpec, args: dict[str, Any]) -> policy.Decision:
    """Resolve what the call reaches on this host, then decide. Touches the filesystem."""
    spec = rules.trusts(spec)
    return policy.decide(rules, spec, args, resources.resolve(spec, args, rules.path_patterns(spec)))


def run_policy(settings: dict[str, Any], profile: str) -> policy.Policy:
    """The policy a run lives by: the user's policy (RunSettings.policy) with the task's profile
    presets, attended or not. The run's profile and unattended flag override the file's."""
    user = policy.load_policy(settings.get("policy") or {})
    return user.model_copy(update={"profile": profile, "unattended": bool(settings.get("unattended"))})


def admit(
    call: ProposedCall,
    *,
    registry: ToolRegistry,
    rules: policy.Policy,
    budget: Budget,
    usage: dict[str, Any],
    breaker_state: dict[str, Any],
    now: float,
    scope: Scope | None = None,
) -> Admission:
    """Run the stages in order; the first refusal wins. Touches the filesystem (resources).

    The authority stage (`scope` given, the run tainted, the call not read-only): a call reaching
    anything outside the task's targets is denied when unattended and asked when attended. The
    record's `outside` lists what it reached outside them even when the policy refused it first."""
    spec = registry.get(call.name)
    if spec is None:
        return Admission("unknown_tool", describe(call, None), UNKNOWN_TOOL.format(name=call.name, available=registry.names()))
    spec = rules.trusts(spec)
    record = describe(call, spec)
    problems = arguments.validate(spec, call.args)
    if problems:
        return Admission("invalid_arguments", record, INVALID_ARGUMENTS.format(name=call.name, problems="; ".join(problems)))
    reached = resources.resolve(spec, call.args, rules.path_patterns(spec))
    decision = policy.decide(rules, spec, call.args, reached)
    record["rule"] = decision.rule_id
    outside = (authority.outside(scope.targets, spec, call.args, reached)
               if scope is not None and scope.taint is not None and not spec.hints.read_only else [])
    if outside:
        record["outside"] = outside
    if decision.action == "deny":
        return Admission("denied", record, DENIED.format(name=call.name, rule=decision.rule_id, reason=decision.reason))
    if outside and scope is not None and scope.taint is not None:
        where, source = "; ".join(outside), f"{scope.taint['tool']} ({scope.taint['call_id']})"
        record["rule"] = authority.RULE
        if rules.unattended:
            return Admission("denied", record, OUT_OF_SCOPE.format(name=call.name, where=where, rule=authority.RULE, source=source))
        decision = policy.Decision("ask", authority.RULE, ASK_OUT_OF_SCOPE.format(name=call.name, where=where, source=source))
    exhaustion = check_before_tool_call(
        usage, budget, tool=call.name, server=spec.server, has_side_effect=not spec.hints.read_only
    )
    if exhaustion is not None:
        return Admission("budget_exceeded", record, BUDGET_EXCEEDED.format(message=exhaustion.message), exhaustion=exhaustion)
    breaker = breakers.check(breaker_state, spec, call.args, now)
    if isinstance(breaker, breakers.Refusal):
        return Admission(breaker.status, record, breaker.text)
    warning = breaker.text if isinstance(breaker, breakers.RepeatWarning) else None
    record["warning"] = warning
    reservation = tool_call_reservation(tool=call.name, server=spec.server, has_side_effect=not spec.hints.read_only)
    verdict: Literal["admit", "ask"] = "ask" if decision.action == "ask" else "admit"
    return Admission(verdict, record, decision.reason, reservation=reservation)


async def admit_all(calls: list[ProposedCall], **context: Any) -> list[Admission]:
    """Admit a turn's calls in order; each admitted call's reservation counts against the next.

    Runs in a worker thread: resolving paths must not block the event loop."""
    return await asyncio.to_thread(_admit_in_order, calls, **context)


def _admit_in_order(calls: list[ProposedCall], **context: Any) -> list[Admission]:
    usage = context.pop("usage")
    admissions = []
    for call in calls:
        admission = admit(call, usage=usage, **context)
        if admission.reservation:
            usage = add_usage(usage, admission.reservation)
        admissions.append(admission)
    return admissions


DATA_OPEN, DATA_CLOSE = "<tool-output>", "</tool-output>"
"""What a tool wrote is shown between these markers: data to read, never instructions (the actor's
prompt says so). The harness's own words (codes, warnings, truncation) stay outside them."""


def model_text(outcome: CallOutcome, excerpt: str, truncated: bool, warning: str | None) -> str:
    """What the model reads for one call: the (bounded) payload, led by its code when it failed.

    The bridge already words timeout and server_unavailable texts with their code; a tool's own
    text (a result, or its error under the `tool_error:` code) is marked as data.
    """
    prefix = "tool_error: " if outcome.status == "tool_error" else ""
    body = as_data(excerpt) if outcome.status in ("ok", "tool_error") else excerpt.strip()
    note = f"\n[warning: {warning}]" if warning else ""
    tail = "\n[output truncated; the full payload is stored]" if truncated else ""
    return f"{prefix}{body}{tail}{note}".strip() or "(no output)"


_MARKER = re.compile(r"<\s*/?\s*tool-output\b[^>]*>", re.IGNORECASE)


def unwrap_data(text: str) -> str:
    """The payload inside `as_data`'s markers (the text itself when it carries none)."""
    if text.startswith(DATA_OPEN + "\n") and DATA_CLOSE in text:
        return text[len(DATA_OPEN) + 1 : text.rindex("\n" + DATA_CLOSE)]
    return text


def as_data(text: str) -> str:
    """`text` between the data markers; markers inside it are removed, so a tool cannot close the block early."""
    defused = _MARKER.sub("[marker removed]", text.strip())
    return f"{DATA_OPEN}\n{defused or '(no output)'}\n{DATA_CLOSE}"
