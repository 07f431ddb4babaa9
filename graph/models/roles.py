"""roles: which model each role of a run calls, and the one it falls back to.

A run names one `model`; `role_models` gives a role its own (a critic independent of the actor, a
cheaper judge), and `base_urls` an endpoint per model name. `fallback_models` names, per role or
for every role (`*`), the model to call when the role's own is unavailable: its circuit open, the
retries spent, or an error that is not transient. That is a degraded mode: the call is traced as
`model_fallback`, counted in `usage.fallbacks_by_role`, and the run's ending says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Role = Literal["planner", "actor", "judge", "critic"]
ROLES: tuple[Role, ...] = ("planner", "actor", "judge", "critic")
EVERY_ROLE = "*"
ACTS_AS = {"sampler": "actor", "goal_check": "actor"}
"""Roles that are the actor's calls made for another purpose: they use the actor's model."""


def settings_for(settings: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The settings `role` calls its model with: its own model and endpoint, else the run's."""
    model = (settings.get("role_models") or {}).get(ACTS_AS.get(role, role)) or settings.get("model") or "scripted"
    return with_model(settings, model)


def fallback_for(settings: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    """The settings of `role`'s fallback model; None when it has none, or it is the model that failed."""
    fallbacks = settings.get("fallback_models") or {}
    model = fallbacks.get(ACTS_AS.get(role, role)) or fallbacks.get(EVERY_ROLE)
    if not model or model == settings_for(settings, role)["model"]:
        return None
    return with_model(settings, model)


def every_model(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The settings of every model the run may call, the run's own first: each must be buildable
    (and priced, under a cost budget) before the run starts."""
    named = [settings.get("model") or "scripted", *(settings.get("role_models") or {}).values(), *(settings.get("fallback_models") or {}).values()]
    return [with_model(settings, model) for model in dict.fromkeys(named)]


def with_model(settings: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The settings with `model` as the one called, at its own endpoint when `base_urls` names one."""
    endpoint = (settings.get("base_urls") or {}).get(model) or settings.get("base_url")
    return {**settings, "model": model, "base_url": endpoint}


def by_role(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per role that called a model: its model, calls, tokens, cost and fallback calls (for `show` and the console)."""
    usage, settings = values.get("usage") or {}, values.get("settings") or {}
    rows = []
    for role, calls in sorted((usage.get("calls_by_role") or {}).items()):
        rows.append({
            "role": role, "model": settings_for(settings, role)["model"], "calls": calls,
            "input_tokens": (usage.get("input_tokens_by_role") or {}).get(role, 0),
            "output_tokens": (usage.get("output_tokens_by_role") or {}).get(role, 0),
            "cost_usd": round((usage.get("cost_usd_by_role") or {}).get(role, 0.0), 6),
            "fallback_calls": (usage.get("fallbacks_by_role") or {}).get(role, 0),
        })
    return rows
