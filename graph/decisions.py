"""decisions: a human's decision on a waiting request, as the CLI's flags and the console's form
give it — one kind at a time, arguments as a JSON object, budget grants as NAME=VALUE limits.
"""

from __future__ import annotations

import json
from typing import Any

from boundloop.graph.core.errors import ConfigError
from boundloop.graph.task import limit_problem


def decision_from_flags(edit: str | None, respond: str | None, grant: list[str], answer: str | None, approver: str) -> dict[str, Any]:
    """The decision `approve` sends, from its flags (at most one of them)."""
    given = [flag for flag, value in (("--edit", edit), ("--respond", respond), ("--grant", grant), ("--answer", answer)) if value]
    if len(given) > 1:
        raise ConfigError(f"approve takes one of --edit, --respond, --grant, --answer (got {' and '.join(given)})")
    if edit is not None:
        arguments = parse_json(edit, "--edit")
        if not isinstance(arguments, dict):
            raise ConfigError(f"--edit must be a JSON object of arguments (got {type(arguments).__name__}); e.g. --edit '{{\"path\": \"a.md\"}}'")
        return {"decision": "edit", "args": arguments, "approver": approver}
    if respond is not None:
        return {"decision": "respond", "result": respond, "approver": approver}
    if grant:
        return {"decision": "approve", "grant": budget_overrides(grant), "approver": approver}
    if answer is not None:
        return {"decision": "approve", "answer": answer, "approver": approver}
    return {"decision": "approve", "approver": approver}


def parse_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{flag} is not valid JSON ({error.msg} at column {error.colno}); e.g. {flag} '{{\"path\": \"a.md\"}}'") from None


def budget_overrides(pairs: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` pairs as budget limits (`none`: no limit on that dimension)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--budget {pair!r} is not NAME=VALUE; e.g. --budget tool_calls=10")
        if value.strip().lower() == "none":
            overrides[name.strip()] = None
            continue
        try:
            number = json.loads(value)  # reads NaN and Infinity too: limit_problem refuses them
        except json.JSONDecodeError:
            number = value
        if problem := limit_problem(name.strip(), number):
            raise ConfigError(f"--budget {pair!r}: {problem} (e.g. --budget tool_calls=10)")
        overrides[name.strip()] = number
    return overrides
