"""boundloop.graph.evals: the evaluation suite — scenarios (`default.json`), the harness that runs
each through the real graph (`harness`, `suite`), the metrics computed from a run's checkpoint,
trace and replay (`metrics`), the memory audit, and a misbehaving MCP server for fault scenarios.

Measures runs; never changes how a run behaves.
"""

from typing import Literal

Provider = Literal["scripted", "http"]
"""How a scripted scenario's model is reached: the in-process scripted model, or the same script
served by a local OpenAI-compatible server (graph/evals/provider_server.py) through the provider path."""
