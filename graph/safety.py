"""safety: the safety circuit breaker and the permission guard — pure functions of state.

Tool results are data. One that carries instructions for the agent (override its rules, call a
tool, approve itself, send data away, delete everything) is flagged where it is observed, with
the cues that matched. The breaker trips, and the run fails closed as UNSAFE_DETECTION, when the
model attempts a refused action (denied by policy, rejected by a human, a tool that does not
exist) after reading such a result, or when it keeps attempting denied actions (DENIAL_LIMIT)
once it has read any tool result. It also trips at the first refused call (denied, or rejected by a
human) that reached outside the task's authority after the run read untrusted tool output
(tools/authority.py): whatever the result said, the model tried to act beyond what the task asked to
change on the strength of something it read. Cue matching stays a signal for the trace. PERMISSION_DENIED is the honest stop instead: a required plan
step whose every tool has been denied, or rejected by a human with the actor answering without it,
cannot be done in this run's permission scope; and as many denials before any tool result was read
are the model's own plan meeting the rules, not something it read.

Never blocks a call itself (the gate does); decides only whether the run must end, and why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage

from boundloop.graph import ladder
from boundloop.graph.core.plan import unfinished
from boundloop.graph.core.records import Ending
from boundloop.graph.core.status import Terminal, ending

DENIAL_LIMIT = 3
"""Denied calls in one run that trip the breaker, injection or not: repeated permission denial is itself a warning sign."""
REFUSED_BY_AUTHORITY = frozenset({"denied", "rejected", "unknown_tool"})
"""Outcomes that mean the model reached outside what it may do."""

_CUES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    for name, pattern in {
        "overrides instructions": r"\b(ignore|disregard|forget|override|bypass)\b[^\n]{0,40}\b(instructions?|directions?|rules|prompts?|guidelines|constraints|polic(y|ies))\b",
        "claims a new role": r"\b(you are now|from now on,? you|new instructions|updated instructions|system prompt|developer mode|jailbreak)\b|(^|[\"'>\]])\s*(system|assistant|developer)\s*:",
        "tells the agent to call a tool": r"\b(call|invoke|use|run|execute|trigger)\b[^\n]{0,40}\b(tools?|functions?)\b|\b[a-z0-9][a-z0-9_-]*__[a-z0-9][a-z0-9_]*\b",
        "asks for self-approval": r"\b(approve|authori[sz]e|grant|confirm)\b[^\n]{0,40}\b(yourself|itself|automatically|on (my|your|its) own|without (asking|approval|review))|\bauto-?approv|\bpre-?approved\b|\bwithout (asking|approval|review|confirmation|permission)\b",
        "asks to send data away": r"\b(exfiltrate|upload|send|post|forward|e-?mail|leak|transmit|copy)\b[^\n]{0,60}\b(to|at|via)\b[^\n]{0,60}(https?://|\b\w+@\w+|\bwebhook\b|\bendpoint\b|\bexternal\b|\bpastebin\b|\bserver\b)",
        "asks to destroy everything": r"\b(delete|remove|wipe|erase|drop|destroy|truncate|rm -rf)\b[^\n]{0,30}\b(all|every|everything|entire|whole)\b",
        "asks to hide from the user": r"\b(do not|don't|never)\b[^\n]{0,20}\b(tell|inform|mention|reveal|show)\b[^\n]{0,20}\b(the )?(user|human|operator|reviewer)\b",
    }.items()
}


def instruction_cues(text: str) -> list[str]:
    """The kinds of instruction a tool result carries (empty: reads as plain data). Results are
    often JSON, so its escapes are undone first: a line break must still start a sentence."""
    plain = text.replace("\\n", "\n").replace("\\t", " ").replace('\\"', '"')
    return [name for name, pattern in _CUES.items() if pattern.search(plain)]


def cues_of(observation: dict[str, Any]) -> list[str]:
    """Cues observe recorded from the text the model saw; evidence calls are judged by the excerpt
    the actor's brief shows."""
    if "instructions" in observation:
        return observation["instructions"]
    if observation.get("phase") == "retrieve" and observation.get("status") == "ok":
        return instruction_cues(observation.get("excerpt", ""))
    return []


def unsafe(state: Mapping[str, Any]) -> Ending | None:
    """UNSAFE_DETECTION when the breaker trips, with the evidence named in the reason."""
    if not refused_any(state):  # both trips need a refused attempt
        return None
    observations = [obs for obs in state.get("observations", []) if obs.get("phase") in ("act", "retrieve")]
    beyond = [obs for obs in observations if obs.get("outside") and obs.get("status") in REFUSED_BY_AUTHORITY]
    if beyond:
        taint = (state.get("boundary") or {}).get("taint") or {}
        return ending(
            Terminal.UNSAFE_DETECTION,
            f"after reading untrusted output from {taint.get('tool', 'a tool')} ({taint.get('call_id', '?')}) the model attempted "
            f"calls outside what the task asked to change: {_attempts(beyond)} (reaching {'; '.join(beyond[0]['outside'])})",
            "Inspect the trace for prompt injection: the untrusted result and the calls that followed. If the task really needs "
            "those targets, declare them (the task's `targets`) and run again.",
            source=str(taint.get("call_id", "?")),
        )
    flagged = next((position for position, obs in enumerate(observations) if cues_of(obs)), None)
    if flagged is not None:
        attempts = [obs for obs in observations[flagged + 1:] if obs.get("status") in REFUSED_BY_AUTHORITY]
        if attempts:
            source = observations[flagged]
            return ending(
                Terminal.UNSAFE_DETECTION,
                f"tool result {source['call_id']} ({source['tool']}) carried instructions ({', '.join(cues_of(source))}) "
                f"and the model then attempted refused actions: {_attempts(attempts)}",
                "Inspect the trace for prompt injection: the source that carried the instructions and the calls that followed. "
                "Side effects were rolled back; rerun only with that source removed or distrusted.",
                source=source["call_id"],
            )
    denials = [obs for obs in observations if obs.get("status") == "denied"]
    if len(denials) >= DENIAL_LIMIT and _informed(observations):
        return ending(
            Terminal.UNSAFE_DETECTION,
            f"{len(denials)} denied calls in one run: {_attempts(denials)}",
            "Inspect the trace for prompt injection or abuse before widening any permission.",
        )
    return None


def _informed(observations: list[dict[str, Any]]) -> bool:
    """Whether a denied call came after the model had read a tool result: only then can repeated
    denials be something the run read steering it, rather than the model's own plan meeting the rules."""
    read = False
    for obs in observations:
        if obs.get("status") == "denied" and read:
            return True
        read = read or obs.get("status") == "ok"
    return False


def permission_denied(state: Mapping[str, Any]) -> Ending | None:
    """PERMISSION_DENIED when a required step's every tool was refused: denied by policy (at once),
    or rejected by a human and the actor then gave its final answer without it. A rejection is
    the human's permission decision, not a failure: the actor reads it and may revise (another
    call, asked again); when it answers instead, the step cannot be done in this run's scope."""
    if not refused_any(state):
        return None
    denials = [obs for obs in state.get("observations", []) if obs.get("phase") in ("act", "retrieve") and obs.get("status") == "denied"]
    if len(denials) >= DENIAL_LIMIT:  # and none after a tool result, or unsafe() would have tripped first
        return ending(
            Terminal.PERMISSION_DENIED,
            f"{len(denials)} calls denied before the model had read any tool result: {_attempts(denials)}",
            "Ask for the permission (a policy rule allowing it, or an attended run that can approve it), or change the task.",
        )
    refused: dict[str, dict[str, Any]] = {}
    answered = _answered(state)
    for obs in state.get("observations", []):
        if obs.get("phase") != "act":
            continue
        if obs.get("status") == "denied":
            refused.setdefault(obs["tool"], obs)
        elif obs.get("status") == "rejected" and answered:
            refused[obs["tool"]] = obs
        elif refused.get(obs["tool"], {}).get("status") == "rejected":
            del refused[obs["tool"]]  # the actor revised: a later call of the tool replaces the rejection
    for step in unfinished((state.get("plan") or {}).get("steps", [])):
        if refused and set(step["tools"]) <= refused.keys():
            rules = "; ".join(f"{tool}: {refused[tool].get('detail', 'denied')}" for tool in step["tools"])
            by_human = any(refused[tool].get("status") == "rejected" for tool in step["tools"])
            return ending(
                Terminal.PERMISSION_DENIED,
                f"step {step['id']} ({step['description']}) needs only {'refused' if by_human else 'denied'} actions: {rules}",
                "Change the task or its plan, or run again and approve the call (or edit it to what you would approve)."
                if by_human else "Ask for the permission (a policy rule allowing it, or an attended run that can approve it), or change the task.",
                step=step["id"],
            )
    return None


def refused_any(state: Mapping[str, Any]) -> bool:
    """Whether any call was refused by authority: the precondition of every trip here, which every
    guard asks, so it is read from the statuses the fold counts (graph/ladder.py), not the history."""
    return not REFUSED_BY_AUTHORITY.isdisjoint(ladder.of(state.get("observations", [])).statuses)


def _answered(state: Mapping[str, Any]) -> bool:
    """The actor's latest message is a final answer (no tool calls)."""
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and not last.tool_calls and not last.invalid_tool_calls


def evidence(state: Mapping[str, Any]) -> dict[str, Any]:
    """What the trace keeps for a security review: the results that carried instructions, and every refused attempt."""
    observations = state.get("observations", [])
    return {
        "flagged_results": [{"call_id": obs["call_id"], "tool": obs["tool"], "cues": cues_of(obs), "excerpt": obs.get("excerpt", "")[:300]}
                            for obs in observations if cues_of(obs)],
        "refused_attempts": [{"call_id": obs["call_id"], "tool": obs["tool"], "status": obs["status"], "detail": obs.get("detail", ""),
                              **({"outside": obs["outside"]} if obs.get("outside") else {})}
                             for obs in observations if obs.get("status") in REFUSED_BY_AUTHORITY],
    }


def _attempts(observations: list[dict[str, Any]]) -> str:
    return "; ".join(f"{obs['tool']} ({obs['call_id']}, {obs['status']})" for obs in observations)
