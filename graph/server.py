"""server: the graph `langgraph dev` and the LangGraph server serve (named in langgraph.json).

`graph` is a graph factory: the server enters it once per use. For a run it drives the run the
way the Runner does (`Services.driving`): one driver per thread (the run lease, also against CLI
and Python drivers), and the run's MCP servers are released when the run stops — it ended, waits
for a human, failed or was cancelled — wherever it resumes next. A run cancelled with
`action="interrupt"` is halted like Ctrl-C on the CLI (`boundloop.graph.run.halt`); with `rollback` the server
deletes its checkpoints (`boundloop.checkpoints.saver.BoundloopSaver.adelete_for_runs`). For schemas and
state reads it only hands out the graph.

The graph is compiled without a checkpointer (the server supplies ours, langgraph.json names
`checkpoints/server.py:checkpointer`), with its own recursion limit, which `stream_mode="events"`
would otherwise replace with langchain-core's default of 25.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.graph.state import CompiledStateGraph

from boundloop.graph.builder import RECURSION_LIMIT, build_graph
from boundloop.graph.run.halt import halt
from boundloop.graph.services import default_services


class ServedGraph(CompiledStateGraph):
    """The compiled loop, with its recursion limit kept by `astream_events` too."""

    def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        # langchain-core fills an unset recursion_limit with 25 before the graph sees the config,
        # and an explicit value wins over the one bound with with_config.
        if not (config or {}).get("recursion_limit"):
            config = {**(config or {}), "recursion_limit": RECURSION_LIMIT}
        return super().astream_events(input, config, **kwargs)


_COMPILED = build_graph(services=default_services())
_SERVED = ServedGraph(**{key: value for key, value in _COMPILED.__dict__.items() if key != "__orig_class__"})


@asynccontextmanager
async def graph(config: RunnableConfig) -> AsyncIterator[CompiledStateGraph]:
    """The served graph; around a run, the run's drive (lease, tool servers, cancel)."""
    configurable = config.get("configurable") or {}
    if not configurable.get("__is_for_execution__"):
        yield _SERVED
        return
    from langgraph_api.errors import UserInterrupt, UserRollback  # the server's own cancel signals

    thread_id = str(configurable["thread_id"])
    services = default_services()
    saver = configurable.get(CONFIG_KEY_CHECKPOINTER)

    async def halt_if_interrupted(stop: BaseException) -> None:
        if isinstance(stop, UserInterrupt) and not isinstance(stop, UserRollback):  # a rollback forgets the run instead
            await halt(_SERVED.copy({"checkpointer": saver}), thread_id, services)

    async with services.driving(thread_id, on_error=halt_if_interrupted):
        yield _SERVED
