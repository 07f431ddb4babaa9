"""The compaction record's short form of dropped calls: arguments and errors kept, bounded however
long the run, and no secret let through (graph/context/short_calls.py)."""

from __future__ import annotations

import secrets as random_secrets

from langchain_core.messages import AIMessage, ToolMessage

from boundloop.graph.context import short_calls
from boundloop.tools import secrets


def _turn(n: int, secret: str) -> tuple[list[object], dict[str, object]]:
    """Turn n: a write with long arguments (one named like a credential) that fails every third turn with a long error."""
    call_id, tool_call_id = f"a{n}.0", f"call_{n}"
    failed = n % 3 == 0
    args = {"path": f"out/{n}.txt", "content": "x" * 5_000, "api_key": secret}
    error = f"write refused for out/{n}.txt: token {secret} rejected; " + "details " * 500
    messages = [AIMessage("", tool_calls=[{"id": tool_call_id, "name": "workspace__write_file", "args": args}]),
                ToolMessage(f"tool_error: {error}" if failed else "ok", tool_call_id=tool_call_id, status="error" if failed else "success")]
    obs = {"call_id": call_id, "tool_call_id": tool_call_id, "status": "tool_error" if failed else "ok", "excerpt": error if failed else "ok"}
    return messages, obs


def test_a_long_run_keeps_the_newest_calls_and_earlier_failures_within_the_bound():
    secret = "sk-" + random_secrets.token_hex(16)
    secrets.remember([secret])  # a server's configured secret: masked by value wherever it shows
    entries: list[dict[str, object]] = []
    observations: list[dict[str, object]] = []
    for first in range(0, 600, 50):  # twelve compactions of fifty turns each
        turns = []
        for n in range(first, first + 50):
            messages, obs = _turn(n, secret)
            turns.append(messages)
            observations.append(obs)
        entries = short_calls.carried(entries, turns, observations)
    text = short_calls.short_lines(entries)
    lines = text.splitlines()
    assert len(lines) == short_calls.RECENT + short_calls.FAILED
    assert all(len(line) <= 320 for line in lines), max(lines, key=len)
    assert [line.split()[1] for line in lines[-short_calls.RECENT:]] == [f"a{n}.0" for n in range(590, 600)]
    assert [line.split()[1] for line in lines[:short_calls.FAILED]] == [f"a{n}.0" for n in range(576, 589, 3)]  # the newest earlier failures
    assert lines[0].startswith('- a576.0 workspace__write_file(path="out/576.txt", content="xxxx')
    assert "-> tool_error: write refused for out/576.txt: token" in lines[0] and lines[-1].endswith("-> ok")
    assert secret not in text and "api_key=" in text
