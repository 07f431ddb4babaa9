"""compact: the context pressure gate's node — make room in the actor's context before its call.

Runs when `act` found its next request over the threshold (graph/context/compaction.py says what is kept
and what goes). Dropped tool results are stored in the payload store under their call id (unless
a bound already stored the full output); the dropped turns as a whole — the model's drafts
included — are archived under `compaction:<n>`. Then the conversation is replaced by the record
and the newest turns that fit under half the threshold. If the record alone does not fit under
the threshold, compaction is unsafe: the run halts with BUDGET_EXHAUSTED on `context_tokens`.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import RemoveMessage, ToolMessage, messages_to_dict
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from boundloop.checkpoints import store
from boundloop.graph.context import compaction, short_calls
from boundloop.graph.models import size
from boundloop.graph.models.catalog import model_id
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.nodes.act import actor_request

UNSAFE = ("context_tokens: the run's must-keep state alone needs {tokens} tokens, over the compaction threshold of "
          "{threshold} ({share:.0%} of the {limit}-token limit); compaction cannot make room without losing it.")
UNSAFE_NEXT = "Run again with a larger context budget (--budget context_tokens={suggest}) or a model with a larger context window."


async def compact(state: LoopState, services: Services) -> LoopUpdate:
    run_id = current_run_id()
    registry = await services.registry(run_id, state["settings"], state.get("tools"))
    specs = [spec.for_model() for spec in registry.specs()]
    previous = state.get("context") or {}
    count = previous.get("compactions", 0) + 1
    turns = compaction.turns(state.get("messages", []))
    limit = compaction.limit_of(state)
    threshold = compaction.threshold_of(state, limit) or 0
    name = model_id(state["settings"])
    measured = {**{key: value for key, value in previous.items() if key != "again"}, "compactions": count, "pressure": False}
    kept: list[list[Any]] = []
    feedback = list(previous.get("feedback") or [])
    candidate = _with(state, measured, feedback, turns, kept, run_id, count)
    tokens, method = size.measure(name, *actor_request(candidate, specs))
    if tokens > threshold - compaction.MARGIN or previous.get("again"):
        share = float(state["settings"].get("context_threshold") or 0.8)
        stop = ending(Terminal.BUDGET_EXHAUSTED, UNSAFE.format(tokens=tokens, threshold=threshold, share=share, limit=limit),
                      UNSAFE_NEXT.format(suggest=int(tokens / share) + 1), dimension="context_tokens")
        return {"context": {**measured, "tokens": tokens, "unsafe": True}, "ending": stop, "status": {"phase": "compact"}}
    low_water = tokens + (threshold - tokens) * compaction.LOW_WATER
    for turn in reversed(turns):  # keep the newest turns while the request stays under the low-water mark
        trial = _with(state, measured, feedback, turns, [turn, *kept], run_id, count)
        trial_tokens, _ = size.measure(name, *actor_request(trial, specs))
        if trial_tokens > low_water:
            break
        kept, tokens = [turn, *kept], trial_tokens
    dropped = turns[: len(turns) - len(kept)]
    feedback += [item for turn in dropped for item in compaction.feedback_of(turn)]
    calls = short_calls.carried(previous.get("calls") or [], dropped, state.get("observations", []))
    await _store(state, services, run_id, dropped, count)
    record = compaction.record(state, run_id, count, feedback, calls)
    return {
        "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), record, *(message for turn in kept for message in turn)],
        "context": {**measured, "role": "actor", "tokens": tokens, "method": method, "limit": limit, "feedback": feedback,
                    "calls": calls, "dropped_turns": len(dropped), "kept_turns": len(kept)},
        "usage": {"compactions": 1},
        "status": {"phase": "compact"},
    }


def _with(state: LoopState, measured: dict[str, Any], feedback: list[str], turns: list[Any], kept: list[Any],
          run_id: str, count: int) -> dict[str, Any]:
    """State as the actor would see it after a compaction that keeps `kept`."""
    dropped = turns[: len(turns) - len(kept)]
    carried = feedback + [item for turn in dropped for item in compaction.feedback_of(turn)]
    calls = short_calls.carried((state.get("context") or {}).get("calls") or [], dropped, state.get("observations", []))
    record = compaction.record(state, run_id, count, carried, calls)
    return {**state, "context": measured, "messages": [record, *(message for turn in kept for message in turn)]}


async def _store(state: LoopState, services: Services, run_id: str, dropped: list[list[Any]], count: int) -> None:
    """Keep what leaves the context retrievable: each result by its call id, and the turns whole,
    all in one write."""
    by_tool_call = {obs.get("tool_call_id"): obs for obs in state.get("observations", [])}
    messages = [message for turn in dropped for message in turn]
    results = [(obs["call_id"], str(message.content)) for message in messages if isinstance(message, ToolMessage)
               and (obs := by_tool_call.get(message.tool_call_id)) is not None and not obs.get("pointer")]
    archive = (f"compaction:{count}", json.dumps(messages_to_dict(messages), default=str))
    await store.put_payloads(await services.pool(), run_id, [*results, archive])
