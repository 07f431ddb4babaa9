"""forms: a posted decision form, as the decision `boundloop approve` / `reject` would send.

The same rules as the CLI's flags (graph/decisions.py): edit takes a JSON object of
arguments, grant takes NAME=VALUE limits, one kind of decision per form.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData

from boundloop.graph.decisions import decision_from_flags
from boundloop.graph.core.errors import ConfigError

ACTIONS = ("approve", "edit", "reject", "respond", "grant", "answer")


def decision_from_form(form: FormData, kind: str, approver: str) -> dict[str, Any]:
    """The decision of the pressed button (`action`) with its field, recorded as `approver`."""
    action = str(form.get("action", ""))
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    if kind == "tool_approval" and action in ("grant", "answer"):
        raise ConfigError(f"a tool approval takes approve, edit, reject or respond, not {action}")
    if kind == "elicitation" and action == "grant":
        raise ConfigError("a server's question takes approve (its defaults), answer (its fields as JSON) or reject (decline), not grant")
    if kind != "tool_approval" and action in ("edit", "respond"):
        raise ConfigError(f"a {kind} request takes approve, reject, grant or answer, not {action}")
    text = str(form.get(action, "") or "")
    if action == "reject":
        return {"decision": "reject", "message": text.strip() or "rejected", "approver": approver}
    if action == "edit":
        return decision_from_flags(text, None, [], None, approver)
    if action == "respond":
        return decision_from_flags(None, text, [], None, approver)
    if action == "grant":
        grants = [pair.strip() for pair in text.replace(",", "\n").splitlines() if pair.strip()]
        if not grants:
            raise ConfigError("grant needs a new limit, e.g. tool_calls=60")
        return decision_from_flags(None, None, grants, None, approver)
    if action == "answer":
        return decision_from_flags(None, None, [], text, approver)
    return decision_from_flags(None, None, [], None, approver)
