"""models: which chat model a run uses, what a call costs, and the one way nodes call a model.

`call_model` is the only place a node talks to a model: it passes the role and the role's call
index (from checkpointed usage) as metadata — which is what makes the scripted model replay
deterministically across crash and resume — runs the request under the timeout, deadline, retry
policy and circuit breaker of graph/models/calls.py, and returns the reply with the state update
it costs (usage, breakers). A call that cannot be made raises `NoReply` carrying the
ending (UNAVAILABLE_DEP or TIMEOUT) and what the attempts spent; nodes return that as their update.

A provider that reports no usage is counted by estimate: one token per `CHARS_PER_TOKEN`
characters of the request (messages and tool schemas) and of the reply, rounded up — more tokens
than English text usually has (about 4 characters each), so an estimate trips a budget early
rather than late. Such calls are counted in `usage.estimated_usage_calls`.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from pydantic import SecretStr

from boundloop.checkpoints import store
from boundloop.graph.models import roles, size, write_ahead
from boundloop.graph.models import calls as model_calls
from boundloop.graph.core.budget import (
    Budget,
    Exhaustion,
    add_usage,
    check_before_model_call,
    model_call_usage,
    reserve_model_call,
)
from boundloop.graph.core.errors import ModelNotConfigured
from boundloop.graph.core.faults import crash_point
from boundloop.graph.core.records import Ending
from boundloop.graph.core.replies import Reply, parse_reply
from boundloop.graph.models.scripted import INDEX_KEY, ROLE_KEY, ScriptedChatModel, load_script
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopUpdate
from boundloop.graph.core.status import Terminal, ending
from boundloop.graph.task import RunSettings
from boundloop.tools import breakers, secrets

CHARS_PER_TOKEN = size.CHARS_PER_TOKEN

# USD per million tokens (input, output). Override or extend per run with RunSettings.prices.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-nano": (0.10, 0.40),
}

TOOL_CALL_PRICES: dict[str, float] = {
    "web_search_call": 0.010,
    "file_search_call": 0.0025,
    "code_interpreter_call": 0.030,
    "mcp_call": 0.0,
}
"""USD per provider-hosted tool call, by output item type (OpenAI's list prices: web search $10 and
file search $2.50 per 1 000 calls; the code interpreter bills $0.03 per container, charged here per
call — an upper bound; connector calls bill only their tokens). Override or extend per run with
RunSettings.tool_prices; a call of a type priced nowhere is unpriced, never free."""

CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
}
"""Tokens one request may carry, per model (beside PRICES). Override or extend per run with
RunSettings.context_windows; the `context_tokens` budget can set a smaller ceiling (graph/context/compaction.py)."""
PHASE_OF = {"planner": "plan", "actor": "act", "judge": "verify", "critic": "critique", "sampler": "act", "goal_check": "act"}
"""The phase node that calls each role: where a run stopped by the model's provider resumes."""
REASK = (
    "Your reply could not be used: {problem}. Reply again with only the JSON object the "
    "instructions ask for, nothing before or after it."
)
MAX_ASKS = 3
"""Times a role is asked for a reply of the expected shape before it counts as failing."""

NO_MODEL = (
    "No API key for model {model!r}: set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
    "OpenAI-compatible endpoint), or run offline with --model scripted --script FILE "
    "(`boundloop demo` runs the shipped script)."
)


def model_for(settings: dict[str, Any]) -> BaseChatModel:
    """The chat model the settings name. Cached per process: building one is not free."""
    model = settings.get("model") or "scripted"
    api_key = None if model == "scripted" else api_key_of(settings)
    return _build(model, settings.get("script"), settings.get("base_url"), api_of(settings), api_key)


def api_key_of(settings: dict[str, Any]) -> str | None:
    """The model's API key: from the run's key file when it started with one, else OPENAI_API_KEY."""
    path = settings.get("api_key_file")
    if not path:
        return os.environ.get("OPENAI_API_KEY") or None
    try:
        key = json.loads(Path(path).read_text()).get("api_key")
    except (OSError, ValueError, AttributeError) as error:
        raise ModelNotConfigured(f"the run's model key is read from {path!r}, which cannot be read now ({type(error).__name__}); "
                                 "restore that file (an `api_key` in a JSON object) and resume the run") from None
    if not isinstance(key, str) or not key:
        raise ModelNotConfigured(f"the run's model key is read from {path!r}, which has no \"api_key\" now; put it back and resume the run")
    return key


def api_of(settings: dict[str, Any]) -> str:
    """The OpenAI API the run's model is called through: `chat_completions` unless the settings say `responses`."""
    return (settings.get("model_apis") or {}).get(settings.get("model") or "scripted", "chat_completions")


@lru_cache(maxsize=16)
def _build(model: str, script: str | None, base_url: str | None, api: str = "chat_completions", api_key: str | None = None) -> BaseChatModel:
    if model == "scripted":
        if not script:
            raise ModelNotConfigured("model 'scripted' needs a script: pass --script FILE (its format: graph/models/README.md, Scripted model)")
        return ScriptedChatModel(script=load_script(script))
    if not api_key:
        raise ModelNotConfigured(NO_MODEL.format(model=model))
    from langchain_openai import ChatOpenAI

    # Responses: typed output items (reasoning, hosted tool calls) stay in the reply's content;
    # the whole conversation is sent each turn from our checkpoint, never a previous_response_id.
    responses: dict[str, Any] = {"use_responses_api": True} if api == "responses" else {}
    return ChatOpenAI(
        model=model,
        api_key=SecretStr(api_key),
        base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        temperature=0,
        max_retries=0,  # retries are ours: budgeted, traced, behind the model's circuit (graph/models/calls.py)
        stream_usage=True,
        **responses,
    )


def tool_call_price_of(settings: dict[str, Any], item_type: str) -> float | None:
    """USD per call of a hosted tool's output item type; None when nobody knows."""
    extra = settings.get("tool_prices") or {}
    return extra[item_type] if item_type in extra else TOOL_CALL_PRICES.get(item_type)


def model_id(settings: dict[str, Any]) -> str:
    model = model_for(settings)
    return model.model_id if isinstance(model, ScriptedChatModel) else str(settings.get("model"))


def price_of(settings: dict[str, Any], name: str) -> tuple[float, float] | None:
    """USD per million (input, output) tokens for model `name`; None when nobody knows.

    The run's own prices come first; a scripted model costs nothing unless a price is given.
    """
    extra = {key: tuple(value) for key, value in (settings.get("prices") or {}).items()}
    if name in extra:
        return extra[name]
    return (0.0, 0.0) if settings.get("model") == "scripted" else PRICES.get(name)


class NoReply(Exception):
    """No usable reply: `update` (the ending, and what the calls spent) is the node's update."""

    def __init__(self, update: LoopUpdate) -> None:
        self.ending = cast(Ending, update["ending"])  # always set: a NoReply carries how the run ends
        super().__init__(self.ending["reason"])
        self.update = update


async def call_model(
    state: Mapping[str, Any],
    services: Services,
    role: str,
    messages: Sequence[BaseMessage],
    *,
    tools: list[dict[str, Any]] | None = None,
    spent: LoopUpdate | None = None,
    options: dict[str, Any] | None = None,
    measure: tuple[int, str] | None = None,
) -> tuple[AIMessage, LoopUpdate]:
    """Call `role`'s model (graph/models/roles.py); return the reply and the update to add to state:
    the usage delta and, when a model's circuit changed, the breaker state. `spent` is what earlier
    calls of the same node cost (its usage counts for the call index and the retry budget). `options`
    are request parameters sent with the tools (e.g. `max_tool_calls` for hosted tools). `measure` is
    the request's `size.measure` when the caller took it already (a long conversation is measured
    once per turn). When the role's model is unavailable and the role has a fallback, the same
    request goes to the fallback, and the update counts it in `usage.fallbacks_by_role`."""
    spent = cast(LoopUpdate, dict(spent or {}))  # a copy: the first call charges into it what earlier executions left (write_ahead)
    primary = roles.settings_for(state["settings"], role)
    try:
        return await _call(state, services, role, primary, messages, tools, spent, options, measure)
    except model_calls.ModelCallFailed as failed:
        lost = _attempts_update(failed.attempts, state)
        backup = roles.fallback_for(state["settings"], role)
        if backup is None or isinstance(failed, model_calls.DeadlineReached):
            raise _no_reply(state, spent, lost, primary, role, failed) from None
        reason = failed.reason
    await store.append_trace(await services.pool(), current_run_id(), "model_fallback", node=PHASE_OF.get(role),
                             data={"role": role, "model": primary["model"], "fallback": backup["model"], "reason": reason})
    after_primary: LoopUpdate = {**spent, "usage": add_usage(spent.get("usage"), lost["usage"]),
                                 "breakers": breakers.merge(spent.get("breakers"), lost.get("breakers"))}
    try:
        reply, update = await _call(state, services, role, backup, messages, tools, after_primary, options, None)
    except model_calls.ModelCallFailed as failed:
        raise _no_reply(state, after_primary, _attempts_update(failed.attempts, state), backup, role, failed) from None
    update["usage"] = add_usage(add_usage(update["usage"], lost["usage"]), {"fallbacks_by_role": {role: 1}})
    if "breakers" not in update and lost.get("breakers"):
        update["breakers"] = lost["breakers"]
    return reply, update


def _no_reply(state: Mapping[str, Any], spent: LoopUpdate, lost: LoopUpdate, settings: dict[str, Any], role: str,
              failed: model_calls.ModelCallFailed) -> NoReply:
    """The node's update when no model answered: what the node spent before, the failed attempts, the ending."""
    return NoReply({**spent, **lost, "usage": add_usage(spent.get("usage"), lost["usage"]), "ending": _ending(state, settings, role, failed)})


async def _call(
    state: Mapping[str, Any],
    services: Services,
    role: str,
    settings: dict[str, Any],
    messages: Sequence[BaseMessage],
    tools: list[dict[str, Any]] | None,
    spent: LoopUpdate,
    options: dict[str, Any] | None,
    measure: tuple[int, str] | None,
) -> tuple[AIMessage, LoopUpdate]:
    model = model_for(settings)
    usage = add_usage(state.get("usage"), spent.get("usage"))
    index = usage["calls_by_role"].get(role, 0)
    config: RunnableConfig = {"metadata": {ROLE_KEY: role, INDEX_KEY: index}}
    name = model_id(settings)
    tokens, method = measure or size.measure(name, messages, tools)
    budget = Budget.model_validate(state["budget"])
    price = price_of(settings, name)
    max_tokens, exhaustion = reserve_model_call(usage, budget, input_tokens=tokens, price=price)
    if exhaustion is not None:  # the call would pass a cap: it is not made
        raise NoReply({**spent, "ending": budget_ending(exhaustion)})
    record = await write_ahead.open_call(services.pool, role, name, _usage_of(role, tokens, 0, price))
    if record.recovered is not None:  # calls an earlier execution of this task made are charged first
        spent["usage"] = add_usage(spent.get("usage"), record.recovered)  # in place: the caller's endings count them too
        usage = add_usage(usage, record.recovered)
        exhaustion = check_before_model_call(usage, budget)
        if exhaustion is None:
            max_tokens, exhaustion = reserve_model_call(usage, budget, input_tokens=tokens, price=price)
        if exhaustion is not None:
            await write_ahead.withdraw_call(record)
            raise NoReply({**spent, "ending": budget_ending(exhaustion)})
    crash_point("model:after_intent")
    runnable = _bound(model, tools, options, max_tokens, api_of(settings))
    measured = size.record(spent.get("context") or state.get("context"), role, tokens, method, context_window_of(settings, name))
    retries = budget.retries
    reply, attempts = await model_calls.invoke(
        lambda: runnable.ainvoke(list(messages), config=config),
        circuit=f"model:{name}",
        breaker_state=breakers.merge(state.get("breakers"), spent.get("breakers")),
        retries_left=None if retries is None else max(retries - usage.get("retries", 0), 0),
        timeout_s=settings.get("model_timeout_s") or RunSettings.model_fields["model_timeout_s"].default,
        on_retry=_trace_retry(services, role),
    )
    update = _attempts_update(attempts, state)
    cost = add_usage(update.get("usage"), _reply_usage(settings, role, messages, tools, reply))
    await write_ahead.answer_call(record, cost)
    update["usage"] = add_usage(add_usage(cost, record.recovered), size.usage_delta(tokens))
    update["context"] = measured
    await services.know_secrets(settings)
    return _masked(reply), update


def _masked(reply: AIMessage) -> AIMessage:
    """The reply with every known secret in its text masked (tools/secrets.py), before it enters the
    run's state: what the model says, the final answer included, is checkpointed, registered and shown.
    Tool-call arguments stay as sent: the gate decides on them."""
    content, extra = secrets.mask(reply.content), secrets.mask(reply.additional_kwargs)
    if content == reply.content and extra == reply.additional_kwargs:
        return reply
    return reply.model_copy(update={"content": content, "additional_kwargs": extra})


async def ask_for(
    state: Mapping[str, Any], services: Services, role: str, messages: Sequence[BaseMessage], kind: type[Reply]
) -> tuple[Reply | None, str | None, LoopUpdate]:
    """Ask `role` for a JSON reply of `kind`; a malformed reply is shown its problem and asked again,
    up to MAX_ASKS calls in all, each charged like any call. Returns (reply or None, the last
    problem, the update the calls cost). Raises `NoReply` when the budget stops the asking."""
    spent: LoopUpdate = {}
    request = list(messages)
    problem = None
    for _ in range(MAX_ASKS):
        if spent and (exhaustion := _exhausted(state, spent)) is not None:
            raise NoReply({**spent, "ending": budget_ending(exhaustion)})
        reply, update = await call_model(state, services, role, request, spent=spent)
        spent = {**spent, **update, "usage": add_usage(spent.get("usage"), update["usage"])}
        parsed, problem = parse_reply(str(reply.text), kind)  # Responses replies carry a list of typed items
        if parsed is not None:
            return parsed, None, spent
        request = [*request, reply, HumanMessage(REASK.format(problem=problem))]
    return None, problem, spent


def budget_ending(exhaustion: Exhaustion) -> Ending:
    """The ending of a run a budget stops before a model call."""
    return ending(exhaustion.code, exhaustion.message, exhaustion.next_safe_action, dimension=exhaustion.dimension)


def _bound(model: BaseChatModel, tools: list[dict[str, Any]] | None, options: dict[str, Any] | None,
           max_tokens: int | None, api: str) -> Any:
    """The model with its tools and request options bound, its reply capped at `max_tokens` (None: no cap).
    Chat Completions takes `max_completion_tokens`, the Responses API `max_output_tokens`; the
    scripted model cuts its reply as a provider stops at the limit."""
    extra = dict(options or {})
    if max_tokens is not None:
        if isinstance(model, ScriptedChatModel):
            extra["max_tokens"] = max_tokens
        else:
            extra["max_output_tokens" if api == "responses" else "max_completion_tokens"] = max_tokens
    if tools:
        return model.bind_tools(tools, **extra)
    return model.bind(**extra) if extra else model


def _exhausted(state: Mapping[str, Any], spent: Mapping[str, Any]) -> Exhaustion | None:
    return check_before_model_call(add_usage(state.get("usage"), spent.get("usage")), Budget.model_validate(state["budget"]))


def _reply_usage(
    settings: dict[str, Any], role: str, messages: Sequence[BaseMessage], tools: list[dict[str, Any]] | None, reply: AIMessage
) -> dict[str, Any]:
    """The usage delta of one reply: the provider's counts, or an estimate when it sent none."""
    usage: Mapping[str, Any] = reply.usage_metadata or {}
    input_tokens, output_tokens = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    estimated = input_tokens <= 0  # a real request always has prompt tokens: none reported means no usage
    if estimated:
        input_tokens, output_tokens = estimate_tokens(messages, tools, reply)
    delta = _usage_of(role, input_tokens, output_tokens, price_of(settings, model_id(settings)))
    return {**delta, "estimated_usage_calls": int(estimated)}


def _usage_of(role: str, input_tokens: int, output_tokens: int, price: tuple[float, float] | None) -> dict[str, Any]:
    """One call's usage delta at `price` (USD per million input and output tokens; None: unknown)."""
    cost = None if price is None else (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
    return model_call_usage(role=role, input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost)


def estimate_tokens(messages: Sequence[BaseMessage], tools: list[dict[str, Any]] | None, reply: AIMessage) -> tuple[int, int]:
    """(input, output) tokens by the character heuristic of the module docstring."""
    sent = sum(size.characters(message) for message in messages) + len(json.dumps(tools or []))
    return math.ceil(sent / CHARS_PER_TOKEN), math.ceil(len(size.message_text(reply)) / CHARS_PER_TOKEN)


def context_window_of(settings: dict[str, Any], name: str) -> int | None:
    """Tokens model `name` accepts in one request; None when nobody knows (no gate then)."""
    return (settings.get("context_windows") or {}).get(name) or CONTEXT_WINDOWS.get(name)


def _attempts_update(attempts: model_calls.Attempts, state: Mapping[str, Any]) -> LoopUpdate:
    """What the attempts cost; the breaker entries that differ from the node's input state (so the
    delta also carries what earlier calls of the same node changed, in `spent`)."""
    update: LoopUpdate = {"usage": {"retries": attempts.retries}}
    if attempts.breakers is not None and (changed := breakers.changes(state.get("breakers") or {}, attempts.breakers)):
        update["breakers"] = changed
    return update


def _ending(state: Mapping[str, Any], settings: dict[str, Any], role: str, failed: model_calls.ModelCallFailed) -> Ending:
    if isinstance(failed, model_calls.DeadlineReached):
        limit = state["budget"]["wall_clock_s"]
        exhaustion = Exhaustion("wall_clock_s", limit, limit, Terminal.TIMEOUT)
        return ending(Terminal.TIMEOUT, f"{exhaustion.message} The {role} call was cut off: {failed.reason}.",
                      exhaustion.next_safe_action, dimension="wall_clock_s")
    where = settings.get("base_url") or os.environ.get("OPENAI_BASE_URL") or "the provider"
    return ending(
        Terminal.UNAVAILABLE_DEP,
        f"the model {model_id(settings)!r} is unavailable to the {role}: {failed.reason}.",
        f"Check the model provider ({where}), its API key and model name; then continue the run with "
        f"`boundloop resume {current_run_id()}`.",
        dependency="model", resume_to=PHASE_OF[role],
    )


def _trace_retry(services: Services, role: str) -> model_calls.OnRetry:
    async def record(retry: int, reason: str, delay_s: float) -> None:
        await store.append_trace(await services.pool(), current_run_id(), "model_retry", node=PHASE_OF.get(role),
                                 data={"role": role, "retry": retry, "error": reason, "backoff_s": round(delay_s, 3)})

    return record


def unusable_reply_ending(role: str, problem: str | None) -> Ending:
    """How an unattended run ends when `role` never replied in the expected shape: a dependency
    failure named for the role — nobody found the work wrong, so nothing is rolled back."""
    return ending(
        Terminal.UNAVAILABLE_DEP,
        f"the {role} gave no usable reply in {MAX_ASKS} asks; the last one: {problem}.",
        f"The work was not found wrong and is kept. Check the {role}'s model, then continue the run with "
        f"`boundloop resume {current_run_id()}` (the {role} is asked again).",
        dependency=role, resume_to=PHASE_OF[role],
    )
