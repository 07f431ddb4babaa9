"""records: an MCP server for a small Postgres-backed record store standing in for business systems.

Tools: get_record, query_records (read-only); create_record, update_record, delete_record (writes
with idempotency keys; update and delete return what they replaced or removed, for undo).
Run: `python -m boundloop.mcp_servers.records --database-url URL [--http --port N]`.
"""

from boundloop.mcp_servers.records.server import build_server

__all__ = ["build_server"]
