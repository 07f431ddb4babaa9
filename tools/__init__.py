"""boundloop.tools: the gateway every tool call passes — the registry of the run's MCP tools, the
bridge to the servers (`bridge`, `connection`), argument validation, what a call reaches on this
host (`resources`), the policy, budget reservations, breakers, the write-ahead ledger, dispatch
with retries, post-conditions, pinning, secrets and the saga that undoes side effects.

Imports only `checkpoints` and graph's core vocabulary; never decides the course of a run.
"""
