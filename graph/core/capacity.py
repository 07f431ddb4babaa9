"""capacity: how many runs one process drives at once, shared by the runner, its services and the
worker command's `--concurrency` bound."""

MAX_ACTIVE_RUNS = 64
"""Runs one process drives at once by default; more wait for a slot (never fail for lack of one).
Each active run holds its MCP servers and takes pool connections for its writes."""
