"""A stdio MCP server whose tools ask things of the client while they run: a question
(elicitation), a completion (sampling), the roots; one reports progress, one adds a tool and
announces `tools/list_changed`. For tests/tools/test_client_features.py."""

from __future__ import annotations

import json
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import SamplingMessage, TextContent, ToolAnnotations

mcp = MCPServer("asking", version="1.0.0")
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green"]},
        "count": {"type": "integer", "minimum": 1, "default": 2},
    },
    "required": ["colour"],
}


@mcp.tool(annotations=READ_ONLY)
async def ask(ctx: Context) -> str:
    """Ask the user for a colour and a count."""
    result = await ctx.session.elicit_form("Which colour, and how many?", SCHEMA)
    return json.dumps({"action": result.action, "content": result.content})


@mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False, open_world_hint=False))
async def note(text: str, ctx: Context) -> str:
    """Ask for a colour, then append `text` and the answer to the file named by the server's first argument (a side effect)."""
    result = await ctx.session.elicit_form("Which colour, and how many?", SCHEMA)
    if result.action != "accept":
        return f"not noted: {result.action}"
    with open(sys.argv[1], "a") as effects:
        effects.write(f"{text} {result.content['colour']}\n")
    return "noted"


@mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False, open_world_hint=False))
async def advise_and_note(text: str, ctx: Context) -> str:
    """Ask the client's model for advice, then append `text` and the advice to the file named by the
    server's first argument (a side effect)."""
    reply = await ctx.session.create_message([SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=50)
    with open(sys.argv[1], "a") as effects:
        effects.write(f"{text}: {reply.content.text}\n")
    return "noted"


@mcp.tool(annotations=READ_ONLY)
async def consult(ctx: Context) -> str:
    """Ask the client's model, then the user."""
    reply = await ctx.session.create_message([SamplingMessage(role="user", content=TextContent(type="text", text="advise"))], max_tokens=50)
    result = await ctx.session.elicit_form("Which colour, and how many?", SCHEMA)
    return json.dumps({"advice": reply.content.text, "action": result.action, "content": result.content})


@mcp.tool(annotations=READ_ONLY)
async def summarize(text: str, ctx: Context) -> str:
    """Ask the client's model to summarize `text`."""
    reply = await ctx.session.create_message([SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=50)
    return json.dumps({"model": reply.model, "text": reply.content.text})


@mcp.tool(annotations=READ_ONLY)
async def roots(ctx: Context) -> str:
    """List the client's roots."""
    return json.dumps([str(root.uri) for root in (await ctx.session.list_roots()).roots])


@mcp.tool(annotations=READ_ONLY)
async def steps(n: int, ctx: Context) -> str:
    """Report progress n times."""
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1}")
    return "done"


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Add a tool and tell the client the list changed."""
    mcp.add_tool(lambda: "new", name="added")
    await ctx.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    mcp.run()
