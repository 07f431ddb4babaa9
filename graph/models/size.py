"""context: how big a model request is, measured before it is sent.

A model with a tokenizer is counted with it: OpenAI models through `tiktoken`, when the model's
encoding can be loaded (tiktoken fetches an encoding file once and caches it; offline and not yet
cached, the estimate is used). Every other model — the scripted one included — is counted by the
documented estimate of graph/models/catalog.py: one token per CHARS_PER_TOKEN characters of the messages
and tool schemas, rounded up, which over-counts English text so a limit trips early, not late.

A long run sends its whole conversation with every request, so each message is counted once:
its count is kept for as long as the message object lives (state never changes a message in place;
LangGraph replaces a message by id with a new object, which is counted afresh), and a request's
measure is the sum of its messages' counts plus its tools'. The tokenizer counts each message's text
on its own, as the provider tokenizes each message of a chat request.

The measure of each call goes into the budget vector (`usage.context_tokens`: the largest request
so far; `usage.context_tokens_total`: all requests together) and into the `context` state channel
(tokens, growth since the same role's previous call, method, limit), which the node's trace event
records.
"""

from __future__ import annotations

import json
import math
import weakref
from functools import lru_cache
from typing import Any, Callable, Sequence

from langchain_core.messages import BaseMessage

CHARS_PER_TOKEN = 3
"""Characters per token of the estimate (see the module docstring)."""
TOKENS_PER_MESSAGE = 4
"""Framing tokens a chat request adds per message (role and separators), counted by the tokenizer."""

Counter = Callable[[str], int]


@lru_cache(maxsize=32)
def counter_for(model: str) -> tuple[Counter, str]:
    """(count tokens of a text, the method's name) for `model`; cached per process."""
    try:
        import tiktoken

        encoding = tiktoken.encoding_for_model(model)
    except Exception:  # unknown model, or the encoding is not cached and cannot be fetched
        return estimate, "estimate"
    return (lambda text: len(encoding.encode(text, disallowed_special=()))), f"tiktoken:{encoding.name}"


def estimate(text: str) -> int:
    return estimate_of_length(len(text))


def message_text(message: BaseMessage) -> str:
    """What a message puts on the wire: its content and any tool calls it makes."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    calls = [*getattr(message, "tool_calls", []), *getattr(message, "invalid_tool_calls", [])]
    return content + (json.dumps(calls, default=str) if calls else "")


def measure(model: str, messages: Sequence[BaseMessage], tools: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """(tokens of the request, method) before it is sent."""
    count, method = counter_for(model)
    tools_text = json.dumps(tools) if tools else ""
    if method == "estimate":  # characters add up exactly, so the estimate rounds once, as for the whole text
        return estimate_of_length(sum(_COUNTS.of(messages, "characters", _length)) + len(tools_text)), method
    tokens = sum(_COUNTS.of(messages, method, lambda message: count(message_text(message))))
    return tokens + count(tools_text) + TOKENS_PER_MESSAGE * len(messages), method


def characters(message: BaseMessage) -> int:
    """Characters `message` puts on the wire (its `message_text`), counted once per message object."""
    return _COUNTS.of([message], "characters", _length)[0]


def _length(message: BaseMessage) -> int:
    return len(message_text(message))


def estimate_of_length(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


class _MessageCounts:
    """Counts per live message object, by kind (characters, or a tokenizer's name), keyed by the
    object's id. A weak reference's callback drops an object's entries when it dies, before its id
    can be reused, so an id found here is the same object: the lookups need no per-message check."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[BaseMessage]] = {}
        self._tables: dict[str, dict[int, int]] = {}

    def of(self, messages: Sequence[BaseMessage], kind: str, compute: Callable[[BaseMessage], int]) -> list[int]:
        """Each message's count; only messages not seen before are counted."""
        table = self._tables.setdefault(kind, {})
        counts = list(map(table.get, map(id, messages)))
        if None in counts:
            for position, message in enumerate(messages):
                if counts[position] is None:
                    counts[position] = self._add(table, message, compute(message))
        return counts  # type: ignore[return-value]  # no None is left

    def _add(self, table: dict[int, int], message: BaseMessage, value: int) -> int:
        key = id(message)
        if key not in self._refs:
            def forget(_: object, key: int = key) -> None:
                self._forget(key)

            self._refs[key] = weakref.ref(message, forget)
        table[key] = value
        return value

    def _forget(self, key: int) -> None:
        self._refs.pop(key, None)
        for table in self._tables.values():
            table.pop(key, None)

    def __len__(self) -> int:
        return len(self._refs)


_COUNTS = _MessageCounts()


def record(previous: dict[str, Any] | None, role: str, tokens: int, method: str, limit: int | None) -> dict[str, Any]:
    """The `context` state value after a `role` request of `tokens`: growth is against the same
    role's previous request (0 for its first)."""
    by_role = dict((previous or {}).get("by_role") or {})
    growth = tokens - by_role[role] if role in by_role else 0
    by_role[role] = tokens
    kept = {key: value for key, value in (previous or {}).items() if key != "pressure"}  # compaction's own keys stay
    return {**kept, "role": role, "tokens": tokens, "growth": growth, "method": method, "limit": limit, "by_role": by_role}


def usage_delta(tokens: int) -> dict[str, int]:
    return {"context_tokens": tokens, "context_tokens_total": tokens}
