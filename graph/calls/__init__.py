"""boundloop.graph.calls: what surrounds one MCP tool call inside the graph — a server's elicitation
asked as an interrupt (`elicitation`), provider-hosted tools under our gate (`hosted`), and what a
run lends a server while its call runs (`scope`).

The gateway itself (registry, policy, budget, ledger, dispatch) lives in `boundloop.tools`."""
