"""The client the official MCP conformance suite drives (`conformance client --command ...`):
boundloop's own MCP bridge, connecting to the scenario's server URL (the last argument), calling
each tool it lists once, and accepting every elicitation with the schema's defaults — what an
attended run's human does when they accept without typing anything."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools import client_features
from tools.bridge import MCPBridge
from tools.config import load_servers

SAMPLE_VALUES = {"number": 1, "integer": 1, "string": "x", "boolean": True}


def arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for each required argument, by type."""
    properties = schema.get("properties") or {}
    return {name: SAMPLE_VALUES.get(properties.get(name, {}).get("type"), "x") for name in schema.get("required") or []}


async def accept_defaults(question: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {}}


async def main(url: str) -> None:
    servers = load_servers({"mcpServers": {"peer": {"url": url}}})
    async with MCPBridge(servers, log_dir=Path(tempfile.mkdtemp())) as bridge:
        for spec in bridge.specs():
            scope = client_features.CallScope(run_id="conformance", tool=spec.qualified_name, unattended=False,
                                              escalations_limit=None, human=accept_defaults)
            with client_features.calling(scope):
                outcome = await bridge.call("peer", spec.name, arguments(spec.input_schema), timeout_s=20)
            print(f"{spec.name}: {outcome.status} {outcome.text[:200]}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))
