"""payload_tool: `boundloop__fetch_payload`, the built-in tool that reads back what compaction
dropped and what a bound cut from a tool result.

It is the harness's own tool, not an MCP server's: the gate answers it directly instead of the
gateway, because there is nothing for the policy to decide — it is read-only, has no arguments
that reach a resource outside the run, and reads only this run's own payloads (a pointer of
another run reads as not found). The budget still applies as to any call: it counts as a tool
call, its text counts against `tool_result_chars`, and it shows at most `max_result_chars`
characters per call (page on with `offset`). It is offered to the actor once the run has stored
anything to read (a compaction, or a result cut to its bound).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import ToolMessage

from boundloop.checkpoints import store
from boundloop.graph import ladder
from boundloop.graph.core.budget import Budget, add_usage, check_before_tool_call
from boundloop.graph.core.records import Usage
from boundloop.graph.services import Services, current_run_id
from boundloop.tools.gateway import ProposedCall, as_data

NAME = "boundloop__fetch_payload"
RULE = "builtin:fetch_payload"
"""The decision behind every read of this run's own stored payloads: allowed within the budget (no
server, no side effect, nothing outside the run)."""
SERVER = "boundloop"
SPEC = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Read a stored tool output or an archived earlier turn of this run, by reference: a call id "
                       "(e.g. a12.0), a payload pointer (payload:<uuid>) or an archive (compaction:<n>). Read-only. "
                       "Long texts come in pages: pass the offset the previous page gave.",
        "parameters": {
            "type": "object",
            "properties": {"ref": {"type": "string"}, "offset": {"type": "integer", "minimum": 0}},
            "required": ["ref"],
            "additionalProperties": False,
        },
    },
}


def offered(state: Mapping[str, Any]) -> bool:
    return bool((state.get("context") or {}).get("compactions")) or ladder.of(state.get("observations", [])).pointers > 0


def split(calls: list[ProposedCall]) -> tuple[list[ProposedCall], list[ProposedCall]]:
    """(calls for the gateway, calls of this built-in tool)."""
    return [call for call in calls if call.name != NAME], [call for call in calls if call.name == NAME]


async def answer(state: Mapping[str, Any], services: Services, calls: list[ProposedCall]) -> dict[str, Any]:
    """One result message and one grounded observation per call, and the usage they spend."""
    budget = Budget.model_validate(state["budget"])
    usage: Usage = {}
    messages, observations = [], []
    for call in calls:
        exhaustion = check_before_tool_call(add_usage(state["usage"], usage), budget, tool=NAME, server=SERVER, has_side_effect=False)
        if exhaustion is not None:
            status, text = "budget_exceeded", f"budget_exceeded: {exhaustion.message}"
        else:
            status, text = await _read(state, services, call.args)
            usage = add_usage(usage, {"tool_calls": 1, "per_tool": {NAME: 1}, "per_server": {SERVER: 1}, "tool_result_chars": len(text)})
        messages.append(ToolMessage(text, tool_call_id=call.tool_call_id, name=NAME, status="success" if status == "ok" else "error"))
        observations.append({
            "call_id": call.call_id, "tool_call_id": call.tool_call_id, "tool": NAME, "server": SERVER, "side_effect": False,
            "args_hash": hashlib.sha256(repr(call.args).encode()).hexdigest(), "phase": "act",
            "stage": "intended" if status == "budget_exceeded" else "observed", "status": status, "grounded": True, "chars": len(text),
            "builtin": True, "rule": RULE,
        })
    return {"messages": messages, "observations": observations, "usage": usage}


async def _read(state: Mapping[str, Any], services: Services, args: Any) -> tuple[str, str]:
    ref = args.get("ref") if isinstance(args, dict) else None
    offset = args.get("offset", 0) if isinstance(args, dict) else 0
    if not isinstance(ref, str) or not ref or not isinstance(offset, int) or offset < 0:
        return "invalid_arguments", f"invalid_arguments: {NAME} needs {{\"ref\": a call id or pointer, \"offset\": a whole number >= 0}}; got {args!r}."
    run_id, pool = current_run_id(), await services.pool()
    try:
        payload = await (store.get_payload(pool, ref) if ref.startswith(store.POINTER_PREFIX) else store.get_call_payload(pool, run_id, ref))
    except ValueError as malformed:
        return "invalid_arguments", f"invalid_arguments: {malformed}"
    if payload is None or payload.thread_id != run_id:
        return "not_found", f"not_found: nothing is stored under {ref!r} for this run; use a call id or pointer from the run state record."
    size = int(state["settings"].get("max_result_chars") or 4_000)
    page = payload.body[offset:offset + size]
    end = offset + len(page)
    more = f"[chars {offset}–{end} of {payload.chars}; next page: offset {end}]" if end < payload.chars else f"[chars {offset}–{end} of {payload.chars}; end]"
    return "ok", f"{ref}:\n{as_data(page)}\n{more}"
