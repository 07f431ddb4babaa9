"""boundloop.graph.models: which chat model a run uses and how it is called — the catalog and price
table (`catalog`), one request under our timeout, retry and circuit breaker (`calls`), the scripted
model for tests and the offline demo (`scripted`), and the versioned role prompts (`prompts`).

Never decides what a run does with a reply: the nodes do."""
