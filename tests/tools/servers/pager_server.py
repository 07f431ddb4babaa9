"""pager_server: an MCP server with a real side effect whose process can die in the middle of a call.

`page` appends one line per page to the `--pages` file (what the fault tests count: an on-call
paged twice is two lines). It takes an `idempotency_key`: a repeat with a key already in the file
answers with the first page and pages nobody. `page_unkeyed` has no key, like most third-party
writes. `--die-once before|after|hang --marker FILE`: the first side-effecting call that finds no
marker file creates it and kills this process (`os._exit`) before or after writing the page, or
hangs before writing it until cancelled, so the server a reconnect or a resume starts behaves
normally. Never used outside tests; stdio only.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

SENDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


def build_server(pages: Path, die_once: str | None, marker: Path | None) -> MCPServer:
    mcp = MCPServer("boundloop-pager", version="0.1.0")

    async def die_if_first(moment: str) -> None:
        """At `moment` ('before' or 'after' the page is written) of the first call: die or hang."""
        due = die_once == moment or (die_once == "hang" and moment == "before")
        if due and marker is not None and not marker.exists():
            marker.touch()
            if die_once == "hang":
                await anyio.sleep_forever()
            os._exit(3)

    def append(entry: dict[str, str]) -> None:
        with pages.open("a", encoding="utf-8") as file:
            file.write(json.dumps(entry) + "\n")
            file.flush()
            os.fsync(file.fileno())

    def sent(key: str) -> dict[str, str] | None:
        if not pages.exists():
            return None
        return next((entry for line in pages.read_text().splitlines() if (entry := json.loads(line)).get("key") == key), None)

    @mcp.tool(annotations=SENDS)
    async def page(oncall: str, message: str, idempotency_key: str | None = None) -> str:
        """Page the on-call person (a repeat with the same idempotency_key pages nobody)."""
        if idempotency_key and (first := sent(idempotency_key)) is not None:
            return f"paged {first['oncall']} (already, with this key)"
        await die_if_first("before")
        append({"oncall": oncall, "message": message, "key": idempotency_key or ""})
        await die_if_first("after")
        return f"paged {oncall}"

    @mcp.tool(annotations=SENDS)
    async def page_unkeyed(oncall: str, message: str) -> str:
        """Page the on-call person."""
        await die_if_first("before")
        append({"oncall": oncall, "message": message, "key": ""})
        await die_if_first("after")
        return f"paged {oncall}"

    return mcp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=Path, required=True)
    parser.add_argument("--die-once", choices=["before", "after", "hang"])
    parser.add_argument("--marker", type=Path)
    args = parser.parse_args(argv)
    build_server(args.pages, args.die_once, args.marker).run()


if __name__ == "__main__":
    main()
