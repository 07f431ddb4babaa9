"""boundloop: a bounded, durable, permissioned agent loop on LangGraph.

    from boundloop import Runner, RunSettings, Task

    async with Runner(RunSettings(database_url=...)) as runner:
        report = await runner.start(Task(goal="...", ...), thread_id="t-1")

The distribution installs this one package; its sub-packages are the repository's folders
(`boundloop.graph`, `boundloop.nodes`, `boundloop.tools`, `boundloop.checkpoints`,
`boundloop.mcp_servers`), mapped by the build configuration. The names below load on first use, so
`import boundloop` costs nothing until one of them is read.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "build_graph": "boundloop.graph.builder",
    "Runner": "boundloop.graph.run.runner",
    "RunReport": "boundloop.graph.run.runner",
    "RunSettings": "boundloop.graph.task",
    "Task": "boundloop.graph.task",
    "Terminal": "boundloop.graph.core.status",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'boundloop' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
