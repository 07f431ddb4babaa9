"""task_check: the task's own text checked against the run's boundary at intake, before any model
sees it.

Two things end a run there. A task that asks the agent to get round its rules — override or bypass
the policy or its instructions, approve its own actions, keep them from the user — ends
UNSAFE_DETECTION: no policy can be relied on by a run whose goal is to escape it. A task that names a
path the policy denies reading, on a server the run has, ends PERMISSION_DENIED: the run could only
fail at the gate, after paying for a plan and turns. The path check asks the same question the gate
asks of a call — each of the run's read-only tools that takes a path, given that path — so the
task is held to the rules it would meet, one resolution for both.

Words that merely mention a tool or an address are not refused here: asking for a tool by name or
to mail a report is ordinary work, and every call is still decided at the gate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from boundloop.graph.core.status import Terminal
from boundloop.graph.safety import instruction_cues
from boundloop.tools import policy as rules
from boundloop.tools import resources
from boundloop.tools.registry import ToolSpec

ESCAPING_CUES = frozenset({"overrides instructions", "asks for self-approval", "asks to hide from the user"})
"""Instruction cues that, in a task, ask the run to escape its boundary rather than to do work."""
PATH_TOKEN = re.compile(r"(?<![\w@:/.~-])((?:\.{1,2}/|/|~/)?(?:[\w.-]+/)*[\w-][\w.-]*(?:/|\.[A-Za-z0-9]{1,10}))(?![\w/-])")
"""A path as people write one in a sentence: with a slash, or a file name with an extension."""


@dataclass(frozen=True)
class Refusal:
    """Why the task is refused before any phase, as the run's ending says it."""

    code: Terminal
    reason: str
    next_safe_action: str


def check(task: Mapping[str, Any], specs: Iterable[ToolSpec], policy: rules.Policy) -> Refusal | None:
    """The refusal the task's text earns under `policy`, or None when it asks only for work."""
    text = "\n".join([task.get("goal", ""), *(task.get("acceptance_criteria") or []), *(task.get("constraints") or [])])
    if cues := sorted(set(instruction_cues(text)) & ESCAPING_CUES):
        return Refusal(Terminal.UNSAFE_DETECTION, f"the task asks the agent to escape its boundary ({', '.join(cues)})",
                       "State the work itself; a rule that is in the way is changed in the policy, not by the task.")
    readers = [spec for spec in specs if policy.trusts(spec).hints.read_only and "path" in resources.argument_kinds(spec).values()]
    for path in dict.fromkeys(PATH_TOKEN.findall(text)):
        for spec in readers:
            if (denied := _denied(spec, path, policy)) is not None:
                return Refusal(Terminal.PERMISSION_DENIED, f"the task names {path!r}, which the policy denies reading: {denied.reason} ({denied.rule_id})",
                               "Leave that path out of the task, or change the rule that denies it.")
    return None


def _denied(spec: ToolSpec, path: str, policy: rules.Policy) -> rules.Decision | None:
    name = next(name for name, kind in resources.argument_kinds(spec).items() if kind == "path")
    arguments = {name: path}
    decision = rules.decide(policy, spec, arguments, resources.resolve(spec, arguments, policy.path_patterns(spec)))
    return decision if decision.action == "deny" and decision.rule_id.startswith("rule:") else None
