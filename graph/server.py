"""server: the graph `langgraph dev` and the LangGraph server serve (named in langgraph.json).

Exported without a checkpointer — the server supplies one, and langgraph.json points it at our
Postgres (`checkpoints/server.py:checkpointer`). Tool sessions and our tables use the process's
default services.
"""

from graph.builder import build_graph
from graph.services import default_services

graph = build_graph(services=default_services())
