"""fitting: a judge's or critic's request cut to the run's context limit.

The actor's requests are kept under the limit by compaction; the judge and the critic are asked
once per verification, with the output and the verified evidence. Their request is fitted instead:
the oldest evidence lines are left out first (each line names its call id, so what was left out is
said, and can be read back), then, if the output alone is still too long, the output is cut, saying
so. The limit is the role's model window and the `context_tokens` budget, the smaller, less a margin
for the counting error; without either, the request is sent whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from boundloop.graph.core.budget import Budget
from boundloop.graph.models import roles, size
from boundloop.graph.models.catalog import context_window_of, model_id
from boundloop.graph.models.prompts import evidence_lines

MARGIN = 64
"""Tokens kept free below the limit: a provider's count can differ a little from ours."""
Build = Callable[[str, str], list[BaseMessage]]
"""(output, evidence text) → the request's messages."""


def limit_for(state: Mapping[str, Any], role: str) -> int | None:
    """Tokens `role`'s request may carry: its model's window and the context budget, the smaller."""
    settings = roles.settings_for(state["settings"], role)
    known = [value for value in (context_window_of(settings, model_id(settings)), Budget.model_validate(state["budget"]).context_tokens) if value]
    return min(known) - MARGIN if known else None


def fitted(state: Mapping[str, Any], role: str, output: str, observations: Sequence[Mapping[str, Any]], build: Build) -> list[BaseMessage]:
    """The request `build` makes from `output` and the verified evidence, within `role`'s limit."""
    lines = evidence_lines(observations)
    request = build(output, _evidence(lines, 0))
    limit = limit_for(state, role)
    if limit is None:
        return request
    name = model_id(roles.settings_for(state["settings"], role))
    dropped = 0
    while (over := size.measure(name, request)[0] - limit) > 0 and dropped < len(lines):
        freed = 0
        while dropped < len(lines) and freed < over:  # the oldest first, about as many tokens as are over
            freed += size.estimate(lines[dropped])
            dropped += 1
        request = build(output, _evidence(lines, dropped))
    if (over := size.measure(name, request)[0] - limit) > 0:
        keep = max(len(output) - over * size.CHARS_PER_TOKEN - 200, 0)
        request = build(f"{output[:keep]}\n[output cut to fit the context limit: {keep} of {len(output)} characters shown]", _evidence(lines, dropped))
    return request


def _evidence(lines: list[str], dropped: int) -> str:
    kept = lines[dropped:]
    if not dropped:
        return "\n".join(kept) or "(no verified observations)"
    note = f"({dropped} older verified observation(s) left out to fit the context limit)"
    return "\n".join([note, *kept])
