"""short_calls: the compaction record's short form of the calls whose turns it dropped — which
arguments each was given and what a failed one said — so the model need not fetch a payload to learn
which file it read or why a write failed.

Made when the turns are dropped (state keeps a call's argument hash, not its arguments) and carried
from one compaction to the next in the `context` channel. Bounded whatever the length of the run:
the newest `RECENT` dropped calls, and up to `FAILED` earlier failures besides (an error seen long
ago still explains a retry); an argument value cut to `VALUE_CHARS`, all the arguments to
`ARGS_CHARS`, an error to `ERROR_CHARS` — at most `RECENT + FAILED` lines of about 300 characters.
Arguments and errors are redacted as the trace is (tools/secrets.py): by key, then by value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from boundloop.tools.secrets import redact

RECENT = 10
"""The newest dropped calls shown with their arguments and outcome."""
FAILED = 5
"""Earlier failed calls kept besides, the newest of them."""
VALUE_CHARS = 40
ARGS_CHARS = 120
ERROR_CHARS = 120
SUCCEEDED = frozenset({"ok"})


def carried(previous: Sequence[Mapping[str, Any]], dropped: Sequence[Sequence[BaseMessage]],
            observations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The short forms to keep after dropping `dropped`: those kept before, then the dropped calls', bounded."""
    entries: list[dict[str, Any]] = [dict(entry) for entry in previous] + _of_turns(dropped, observations)
    recent = entries[-RECENT:]
    earlier = [entry for entry in entries[:-RECENT] if entry["failed"]][-FAILED:] if len(entries) > RECENT else []
    return [*earlier, *recent]


def short_lines(entries: Sequence[Mapping[str, Any]]) -> str:
    """The record's lines, oldest first: `- a3.0 workspace__read_file(path="notes.md") -> ok`, or
    `-> tool_error: <the error's first ERROR_CHARS characters>`."""
    return "\n".join(f"- {entry['line']}" for entry in entries) or "(none dropped yet)"


def _of_turns(turns: Sequence[Sequence[BaseMessage]], observations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_tool_call = {obs.get("tool_call_id"): obs for obs in observations}
    messages = [message for turn in turns for message in turn]
    results = {message.tool_call_id: message for message in messages if isinstance(message, ToolMessage)}
    entries = []
    for message in messages:
        for call in message.tool_calls if isinstance(message, AIMessage) else []:
            obs, result = by_tool_call.get(call["id"]) or {}, results.get(call["id"] or "")
            status = str(obs.get("status") or (result.status if result is not None and result.status != "success" else "ok" if result else "no result"))
            failed = status not in SUCCEEDED
            outcome = status + (f": {error}" if failed and (error := _error(obs, result)) else "")
            line = f"{obs.get('call_id') or call['id']} {call['name']}({_args(call.get('args') or {})}) -> {outcome}"
            entries.append({"call_id": obs.get("call_id") or call["id"], "line": line, "failed": failed})
    return entries


def _args(args: Mapping[str, Any]) -> str:
    shown = redact(dict(args))
    text = ", ".join(f"{key}={_cut(json.dumps(value, ensure_ascii=False, default=str), VALUE_CHARS)}" for key, value in shown.items())
    return _cut(text, ARGS_CHARS)


def _error(obs: Mapping[str, Any], result: ToolMessage | None) -> str:
    """What the tool said of the failure (the observation's excerpt), else why the call did not run, else its result as the model saw it."""
    text = obs.get("excerpt") or obs.get("detail") or (result.content if result is not None and isinstance(result.content, str) else "")
    return _cut(str(redact(" ".join(str(text).split()))), ERROR_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
