"""mcp_scope: what the run lends an MCP server while one of its tool calls runs, and what that cost.

`for_call` builds the call's `CallScope` (tools/client_features.py) inside the execute task: the
run's workspace as roots, progress written to LangGraph's `custom` stream (kind `tool_progress`,
which the CLI prints as a progress line), questions for the human while `budget.escalations`
lasts and the run is attended (asked at an interrupt, graph/calls/elicitation.py), and sampling through
the run's model (role `sampler`: the same budget check, timeout, retries and circuit breaker as
every model call, graph/models/catalog.py).
`settle` adds what the server's requests spent (escalations, model usage) to the call's update,
puts them in the call's observation (`server_requests`), and writes each to the run's trace
(kind `mcp_request`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.config import get_stream_writer
from mcp import types

from boundloop.checkpoints import store
from boundloop.graph.core.budget import Budget, add_usage, check_before_model_call
from boundloop.graph.core.records import Observation
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopUpdate
from boundloop.tools import breakers, secrets
from boundloop.tools.client_features import CallScope, SamplingRefused

SAMPLER = "sampler"
"""The model role that answers servers' sampling requests (a scripted model's `roles.sampler`)."""


def for_call(call: dict[str, Any], payload: dict[str, Any], services: Services) -> CallScope:
    settings = payload["settings"]
    budget = payload.get("budget") or {}
    usage = payload.get("usage") or {}
    limit = Budget.model_validate(budget).escalations if budget else 0
    writer = get_stream_writer()
    run_id = current_run_id()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        writer({"kind": "tool_progress", "tool": call["name"], "call_id": call["call_id"],
                "progress": done, "total": total, "message": message})

    scope = CallScope(
        run_id=run_id,
        tool=call["name"],
        unattended=bool(settings.get("unattended")),
        escalations_used=usage.get("escalations", 0),
        escalations_limit=limit,
        roots=tuple(root for root in [settings.get("workspace_root")] if root),
        progress=progress,
        stops_for_questions=bool(budget),  # evidence and check calls (retrieve, verify) never wait for a human
    )
    if budget:
        scope.sample = _sampler(payload, services, scope.spent)
    return scope


def _sampler(payload: dict[str, Any], services: Services, spent: dict[str, Any]) -> Any:
    """The run's model for one tool call's sampling requests. A request arrives on the server
    connection's receive loop, whose context is the one the connection started in — a step that may
    be long over, with its deadline passed — so the model is asked in a copy of the call's own context
    (its step's deadline, its run's config), taken here, while the call is being set up."""
    from boundloop.graph.models.catalog import NoReply, call_model

    call_context = contextvars.copy_context()

    async def sample(params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        state = {"settings": payload["settings"], "budget": payload["budget"], "usage": payload.get("usage") or {},
                 "breakers": breakers.merge(payload.get("breakers"), spent.get("breakers"))}
        exhausted = check_before_model_call(add_usage(state["usage"], spent.get("usage")), Budget.model_validate(state["budget"]))
        if exhausted is not None:
            raise SamplingRefused(f"the run cannot pay for it: {exhausted.message}")
        try:
            asked = call_model(state, services, SAMPLER, _messages(params), spent=cast("LoopUpdate", dict(spent)))  # what the call's earlier requests spent: usage and breakers
            reply, update = await asyncio.create_task(asked, context=call_context.copy())
        except NoReply as failed:  # its update is all the call's requests spent, this one's included
            spent.update({key: failed.update[key] for key in ("usage", "breakers") if key in failed.update})
            raise SamplingRefused(f"the run's model did not answer: {failed.ending['reason']}") from None
        _charge(spent, update)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=_text(reply)),
                                         model=str(reply.response_metadata.get("model_name") or payload["settings"].get("model") or "scripted"),
                                         stop_reason="endTurn")

    return sample


def _charge(spent: dict[str, Any], update: Mapping[str, Any]) -> None:
    spent["usage"] = add_usage(spent.get("usage"), update.get("usage"))
    if "breakers" in update:
        spent["breakers"] = breakers.merge(spent.get("breakers"), update["breakers"])


def _messages(params: types.CreateMessageRequestParams) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage(params.system_prompt)] if params.system_prompt else []
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        text = "\n".join(block.text if isinstance(block, types.TextContent) else f"[{getattr(block, 'type', 'unknown')} content not shown]"
                         for block in blocks)
        messages.append(HumanMessage(text) if message.role == "user" else AIMessage(text))
    return messages


def _text(reply: AIMessage) -> str:
    return str(reply.text)


async def settle(scope: CallScope, result: LoopUpdate, services: Services, *, phase: str) -> LoopUpdate:
    """`result` (the call's update) with the scope's costs and requests added; requests traced."""
    spent = scope.spent
    if not scope.events and not scope.escalations and not spent.get("usage"):
        return result
    usage = add_usage(result.get("usage"), spent.get("usage"))
    usage["escalations"] += scope.escalations
    update: LoopUpdate = {**result, "usage": usage}
    if "breakers" in spent:
        update["breakers"] = spent["breakers"]
    if scope.events:
        observation: Observation = {**result["observations"][0], "server_requests": secrets.redact(scope.events)}
        update["observations"] = [observation]
        pool = await services.pool()
        for event in scope.events:
            await store.append_trace(pool, current_run_id(), "mcp_request", node=phase, data=secrets.redact(event))
    return update
