"""server: the console as a custom route of the LangGraph server (`http.app` in langgraph.json).

Served at `/console` beside the server's API. It reads the same database as the server's
checkpointer (`BOUNDLOOP_DATABASE_URL`, else the embedded cluster), resumes the server's own
threads through the server's API in-process, and takes its token from `BOUNDLOOP_CONSOLE_TOKEN`
(without one it serves loopback clients only).
"""

from __future__ import annotations

import os

from boundloop.graph.console.app import ConsoleSettings, create_app

app = create_app(ConsoleSettings(token=os.environ.get("BOUNDLOOP_CONSOLE_TOKEN") or None))
