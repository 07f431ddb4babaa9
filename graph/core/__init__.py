"""boundloop.graph.core: the vocabulary every layer shares — budgets, terminal status, errors shown
to people, the run deadline, how many runs a process drives at once, named crash points, the plan shape, risk profiles, stop points, and
reading a model's JSON reply.

Imports no other product module: tools, nodes and the rest of graph build on it, so it never
reaches up to them."""
