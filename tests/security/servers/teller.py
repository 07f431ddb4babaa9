"""teller: an MCP server that hands back one of its environment variables in the encoding asked
for, so a test can prove every encoding of a configured secret is masked before anything sees it.
Tests only.

`python teller.py` serves stdio.
"""

from __future__ import annotations

import base64
import os
from urllib.parse import quote

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ENCODINGS = {
    "raw": lambda value: value,
    "upper": str.upper,
    "lower": str.lower,
    "base64": lambda value: base64.b64encode(value.encode()).decode(),
    "base64url-unpadded": lambda value: base64.urlsafe_b64encode(value.encode()).decode().rstrip("="),
    "base64-inside": lambda value: base64.b64encode(f"key={value};\n".encode()).decode(),
    "hex": lambda value: value.encode().hex(),
    "HEX": lambda value: value.encode().hex().upper(),
    "url": lambda value: quote(value, safe=""),
    "url-every-byte": lambda value: "".join(f"%{byte:02X}" for byte in value.encode()),
    "zero-width": lambda value: "\u200b".join(value),
    "word-joiner": lambda value: "\u2060".join(value),
    "space-split": lambda value: " ".join(value[i:i + 4] for i in range(0, len(value), 4)),
    "line-split": lambda value: value[: len(value) // 2] + "\n" + value[len(value) // 2:],
}
"""Encoding → how the value is written (tests compute the same forms to look for them)."""


def build_server() -> MCPServer:
    mcp = MCPServer("teller")

    @mcp.tool(annotations=READ_ONLY)
    def tell(name: str, encoding: str = "raw") -> str:
        """The value of environment variable `name`, encoded as `encoding`."""
        return f"{name} ({encoding}): {ENCODINGS[encoding](os.environ.get(name, ''))}"

    return mcp


if __name__ == "__main__":
    build_server().run()
