"""errors: every exception the tools package raises, in one place.

These are the *run-ending* channel (a terminal status or a CLI message, never a tool result the model reads): the server config or the policy cannot be used,
or a server the run depends on did not start. Anything the model should read instead travels
as a `CallOutcome` status (tools/outcome.py) and never as one of these.

    ToolsError                  base of everything below
    ├── ConfigError             the mcpServers config cannot be used (file, JSON, keys, values)
    ├── AuthorizationNeeded     an OAuth server has no usable login (tools/oauth.py)
    ├── PolicyError             the permission policy cannot be used (file, JSON, rules, profile)
    └── BridgeError             the MCP bridge was asked for something it cannot do
        ├── ServerStartError    a configured MCP server did not start (strict start)
        └── UnknownServerError  a call named a server that is not in the config

Each message names the thing, the offending value, and the fix.
"""

from __future__ import annotations


class ToolsError(Exception):
    """Base of every error raised by the tools package."""


class ConfigError(ToolsError):
    """The MCP server config cannot be used; the message lists every problem found."""


class PolicyError(ToolsError):
    """The permission policy cannot be used; the message lists every problem found."""


class BridgeError(ToolsError):
    """The MCP bridge was used in a way it does not support (e.g. called before `start()`)."""


class ServerStartError(BridgeError):
    """A configured MCP server did not start.

    Carries what a user needs to fix it without reading our code: the server's config name,
    what we ran or where we connected, the tail of its stderr, and the log file with the rest.
    """

    def __init__(self, server: str, target: str, cause: str, fix: str, stderr_tail: str = "", log_path: str = ""):
        self.server = server
        self.target = target
        self.cause = cause
        self.fix = fix
        self.stderr_tail = stderr_tail
        self.log_path = log_path
        lines = [f"MCP server {server!r} did not start: {cause}", f"  started as: {target}"]
        if stderr_tail:
            lines.append("  its stderr ended with:")
            lines.extend(f"    | {line}" for line in stderr_tail.splitlines())
        if log_path:
            lines.append(f"  full stderr log: {log_path}")
        lines.append(f"  fix: {fix}")
        super().__init__("\n".join(lines))


class AuthorizationNeeded(ToolsError):
    def __init__(self, server: str) -> None:
        super().__init__(f"authorization needed: run `boundloop auth {server}`")
        self.server = server


class UnknownServerError(BridgeError):
    """A call named a server that is not in the bridge's config (a gateway bug, not a model error)."""

    def __init__(self, server: str, configured: list[str]):
        self.server = server
        super().__init__(
            f"no MCP server named {server!r} in this bridge; configured: {', '.join(configured) or '(none)'}. "
            "Look the tool up in the registry built from bridge.specs() before calling it."
        )
