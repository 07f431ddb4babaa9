"""workspace: an MCP server for text files confined to one root directory.

Tools: list_files, read_file, search (read-only); write_file, edit_file, move_file, delete_file
(destructive; each returns what it replaced or removed, for undo). `paths.parts` reads every path;
`beneath` opens everything from a root descriptor, following no symlink, so no race can lead out.
Run: `python -m boundloop.mcp_servers.workspace --root DIR [--allow-hard-links] [--http --port N]`.
"""

from boundloop.mcp_servers.workspace.server import build_server

__all__ = ["build_server"]
