"""forms: the JSON schemas Studio renders for fields that stay plain JSON at run time.

The task's budget overrides, the MCP server map and the policy document are checkpointed as
plain dicts, but their shapes are known (`Budget`, `ServerConfig`, `Policy`): these schemas
describe them field by field, derived from those models so they never drift from them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def budget_overrides_schema() -> dict[str, Any]:
    """Every budget dimension, optional; null lifts the limit."""
    from boundloop.graph.core.budget import Budget

    dimensions = _inline(Budget)["properties"]
    for schema in dimensions.values():
        schema.pop("default", None)
    return {"type": "object", "properties": dimensions, "additionalProperties": False}


def servers_schema() -> dict[str, Any]:
    """The `mcpServers` shape (server name → one server's settings), or a servers file's path."""
    from boundloop.tools.config import ServerConfig

    server = _inline(ServerConfig)
    server["properties"].pop("name")
    server["required"] = [field for field in server.get("required", []) if field != "name"]
    document = {
        "type": "object",
        "properties": {"mcpServers": {"type": "object", "additionalProperties": server, "description": "Server name → how to start or reach it."}},
        "required": ["mcpServers"],
    }
    path = {"type": "string", "description": "Absolute path of a servers file, read when a server starts."}
    return {"anyOf": [document, path]}


def policy_schema() -> dict[str, Any]:
    """The policy-file shape (`boundloop.tools.policy.Policy`)."""
    from boundloop.tools.policy import Policy

    return _inline(Policy)


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` references replaced by the definitions, so it can
    be nested inside another schema."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(definitions[node["$ref"].rpartition("/")[2]])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)
