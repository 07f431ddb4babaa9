"""Fault tests: full runs through the real graph, real Postgres and the real workspace MCP server,
with the model played by the local fake OpenAI-compatible endpoint (tests/graph/fake_openai.py)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest

from boundloop.graph.run.runner import RunReport
from tests.graph.conftest import run_script, runner, workspace  # noqa: F401 (the loop tests' fixtures, shared)

MODEL = "fake-model"
PRICE = (2.0, 8.0)

RunProvider = Callable[..., Awaitable[RunReport]]


@pytest.fixture
def run_provider(run_script, monkeypatch) -> RunProvider:  # noqa: F811 (the imported fixture)
    """`await run_provider(base_url, task={...}, **settings)`: a run against an OpenAI-compatible endpoint.
    It plans and is critiqued unless the test chooses, so every role's request meets the provider's faults."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")

    async def run(base_url: str, *, task: dict[str, Any] | None = None, **settings: Any) -> RunReport:
        chosen = {"planning": "always", "critique": "always", **settings}
        return await run_script({}, task=task, model=MODEL, script=None, base_url=base_url, prices={MODEL: PRICE}, **chosen)

    return run


async def trace_of(runner, report: RunReport, kind: str) -> list[dict[str, Any]]:  # noqa: F811
    return [event for event in await runner.trace(report.thread_id) if event["kind"] == kind]
