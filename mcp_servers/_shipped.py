"""_shipped: the `MCPServer` every server in this package is built on.

It fixes what the official conformance suite's server scenarios flag on a bare `MCPServer`:
`serverInfo.version` is the package's version (not empty), a tool's description is its docstring
without the source indentation, and `prompts/get` of a name the server does not have answers
JSON-RPC -32602 (invalid params) instead of an internal error.

Its `tools/list` says how long the list stays as it is (MCP's `ttlMs` caching hint, TOOLS_TTL_MS):
every server here registers its tools when it is built and never changes them while it runs. A
client that trusts the server may then check a call against that listing instead of listing again
(tools/fresh_listing.py).
"""

from __future__ import annotations

import inspect
from importlib import metadata
from typing import Any, Callable, TypeVar

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.caching import CacheHint
from mcp.types import INVALID_PARAMS

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _version() -> str:
    try:
        return metadata.version("boundloop")
    except metadata.PackageNotFoundError:
        return "0.0.0"


VERSION = _version()
TOOLS_TTL_MS = 60_000
"""How long a `tools/list` answer may be taken as current; the tools never change while the server runs."""


class ShippedServer(MCPServer):
    def __init__(self, name: str, **kwargs: Any) -> None:
        kwargs.setdefault("cache_hints", {"tools/list": CacheHint(ttl_ms=TOOLS_TTL_MS)})
        super().__init__(name, version=kwargs.pop("version", VERSION), **kwargs)

    def tool(self, name: str | None = None, *, description: str | None = None, **kwargs: Any) -> Callable[[_Fn], _Fn]:
        def register(fn: _Fn) -> _Fn:
            text = description if description is not None else inspect.cleandoc(fn.__doc__ or "") or None
            return super(ShippedServer, self).tool(name, description=text, **kwargs)(fn)

        return register

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name!r}; prompts/list names the prompts this server has")
        return await super().get_prompt(name, arguments, context)
