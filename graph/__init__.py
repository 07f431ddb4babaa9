"""graph: the boundloop state machine — state, budgets, guards, builder — and its surfaces.

    from graph import build_graph, Runner, Task, RunSettings

The names are loaded on first use, so importing one node module does not pull in the builder
(and through it every node) first.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "build_graph": "graph.builder",
    "Runner": "graph.runner",
    "RunReport": "graph.runner",
    "RunSettings": "graph.task",
    "Task": "graph.task",
    "Terminal": "graph.status",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'graph' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
