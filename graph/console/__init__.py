"""console: the web console — runs, one run's timeline, and the approval inbox (`boundloop console`,
and the `/console` route of the LangGraph server through langgraph.json's `http.app`)."""

from boundloop.graph.console.app import ConsoleSettings, create_app

__all__ = ["ConsoleSettings", "create_app"]
