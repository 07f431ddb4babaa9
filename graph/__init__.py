"""graph: the boundloop state machine — state, budgets, guards, builder — and its surfaces.

    from graph import build_graph, Runner, Task, RunSettings
"""

from graph.builder import build_graph
from graph.runner import RunReport, Runner
from graph.status import Terminal
from graph.task import RunSettings, Task

__all__ = ["build_graph", "Runner", "RunReport", "RunSettings", "Task", "Terminal"]
