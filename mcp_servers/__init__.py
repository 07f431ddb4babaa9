"""mcp_servers: the MCP servers boundloop ships; every tool the loop uses comes from an MCP server.

- `workspace`: text files confined to one root directory (list, read, search, write, edit, move, delete).
- `records`: a small Postgres-backed record store standing in for business systems (CRUD with
  idempotency keys; writes return what they replaced, for compensation).
- `sandbox`: run a Python snippet or a command in a child process with CPU, memory, file-size,
  output and wall-time limits and no network.

Each is `build_server(...) -> MCPServer` plus a main: `python -m mcp_servers.<name> ...` serves over
stdio; add `--http [--host 127.0.0.1] [--port N]` to serve streamable HTTP at `/mcp`. The shared
command line lives in `_serve`. This package never talks to the agent loop: it only serves tools.
"""
