"""explain: the one-sentence account of a run, generated from its trace alone.

"Allowed to do X, chose path Y, called tools Z, spent budget B, updated state S from verified
observations, terminated because T."
"""

from __future__ import annotations

from collections import Counter
from typing import Any

PATH_SHOWN = 14
"""Steps of the path spelled out; a longer path is cut in the middle."""


def explain(events: list[dict[str, Any]]) -> str:
    nodes = [event for event in events if event["kind"] in ("node", "call")]
    header = next((event["data"].get("run") for event in nodes if event["data"].get("run")), None) or {}
    allowed = header.get("allowed") or {}
    tools = allowed.get("tools") or []
    scope = f"as {header['user']}, " if header.get("user") else ""
    mode = "unattended" if allowed.get("unattended") else "attended"
    allowed_text = f"{scope}profile {allowed.get('profile') or '?'} ({mode}) with {len(tools)} tool(s){': ' + ', '.join(tools[:6]) if tools else ''}{' …' if len(tools) > 6 else ''}"
    calls = [call for event in nodes for call in event["data"].get("tool_calls", [])]
    counted = Counter(f"{call.get('name')} ({call.get('status')})" for call in calls)
    called = ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in counted.items()) or "no tools"
    total: dict[str, Any] = next((event["data"]["budget_total"] for event in reversed(nodes) if event["data"].get("budget_total")), {})
    spent = (f"{total.get('calls', 0)} calls, {total.get('tokens', 0)} tokens, ${total.get('cost_usd', 0):.4f}, "
             f"{total.get('retries', 0)} retries, {total.get('time_s', 0):.2f}s") if total else "nothing recorded"
    verified = [call for call in calls if call.get("status") == "ok"]
    effects = sum(1 for call in verified if call.get("side_effect"))
    terminal = next((event["data"].get("terminal") for event in reversed(nodes) if event["data"].get("terminal")), None)
    because = f"{terminal['code']}: {terminal['reason']}" if terminal else "it has not terminated yet (waiting or running)"
    return (f"Allowed to act {allowed_text}; chose path {_path(nodes)}; called {called}; spent {spent}; "
            f"updated state from {len(verified)} verified observation(s) ({effects} side effect(s)); terminated because {because}.")


def _path(nodes: list[dict[str, Any]]) -> str:
    """The nodes in order, a node repeated back to back (parallel calls) shown once with its count."""
    collapsed: list[str] = []
    for name in (event["node"] for event in nodes):
        if collapsed and collapsed[-1].split(" ×")[0] == name:
            base, _, count = collapsed[-1].partition(" ×")
            collapsed[-1] = f"{base} ×{int(count or 1) + 1}"
        else:
            collapsed.append(name)
    if len(collapsed) > PATH_SHOWN:
        half = PATH_SHOWN // 2
        collapsed = collapsed[:half] + [f"… {len(collapsed) - PATH_SHOWN} more …"] + collapsed[-half:]
    return " → ".join(collapsed)
