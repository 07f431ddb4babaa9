"""models: which chat model a run uses, what a call costs, and the one way nodes call a model.

`call_model` is the only place a node talks to a model: it passes the role and the role's call
index (from checkpointed usage) as metadata — which is what makes the scripted model replay
deterministically across crash and resume — and returns the usage delta of the call.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Sequence

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage

from graph.budget import model_call_usage
from graph.errors import ModelNotConfigured
from graph.scripted import INDEX_KEY, ROLE_KEY, ScriptedChatModel, load_script

# USD per million tokens (input, output). Override or extend per run with RunSettings.prices.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-nano": (0.10, 0.40),
}

NO_MODEL = (
    "No API key for model {model!r}: set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
    "OpenAI-compatible endpoint), or run offline with --model scripted --script FILE "
    "(`boundloop demo` runs the shipped script)."
)


def model_for(settings: dict[str, Any]) -> BaseChatModel:
    """The chat model the settings name. Cached per process: building one is not free."""
    return _build(settings.get("model") or "scripted", settings.get("script"), settings.get("base_url"))


@lru_cache(maxsize=16)
def _build(model: str, script: str | None, base_url: str | None) -> BaseChatModel:
    if model == "scripted":
        if not script:
            raise ModelNotConfigured("model 'scripted' needs a script: pass --script FILE (see README, Scripted model)")
        return ScriptedChatModel(script=load_script(script))
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key:
        raise ModelNotConfigured(NO_MODEL.format(model=model))
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        api_key=api_key,
        base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        temperature=0,
        max_retries=2,
        stream_usage=True,
    )


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


async def call_model(
    state: dict[str, Any],
    role: str,
    messages: Sequence[BaseMessage],
    *,
    tools: list[dict[str, Any]] | None = None,
) -> tuple[AIMessage, dict[str, Any]]:
    """Call the run's model as `role`; return the reply and the usage delta to add to state."""
    settings = state["settings"]
    model = model_for(settings)
    runnable = model.bind_tools(tools) if tools else model
    index = state.get("usage", {}).get("calls_by_role", {}).get(role, 0)
    reply = await runnable.ainvoke(list(messages), config={"metadata": {ROLE_KEY: role, INDEX_KEY: index}})
    usage = reply.usage_metadata or {}
    input_tokens, output_tokens = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    price = price_of(settings, model_id(settings))
    cost = None if price is None else (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
    return reply, model_call_usage(role=role, input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost)
