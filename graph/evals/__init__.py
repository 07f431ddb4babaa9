"""boundloop.graph.evals: the evaluation suite — scenarios (`default.json`), the harness that runs
each through the real graph (`harness`, `suite`), the metrics computed from a run's checkpoint,
trace and replay (`metrics`), the memory audit, and a misbehaving MCP server for fault scenarios.

Measures runs; never changes how a run behaves.
"""
