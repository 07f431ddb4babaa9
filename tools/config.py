"""config: the user's MCP servers, read from the common `mcpServers` JSON shape.

Owns parsing, `${VAR}` expansion and validation of the server config, and the one JSON-file
reader the tools package uses for user files. Never starts a server (tools/bridge.py does) and
never decides permissions (tools/policy.py does).

    {"mcpServers": {
        "time":  {"command": "/abs/venv/bin/mcp-server-time", "args": ["--local-timezone", "UTC"],
                  "env": {"TZ": "${TZ:-UTC}"}, "cwd": "/tmp"},
        "notes": {"url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                  "trusted": true, "timeout_s": 20, "protocol": "legacy"}}}

Our keys on top of the common shape: `trusted` (only a trusted server's annotations may relax a
permission decision), `trusted_output` (reading its results does not taint the run), `timeout_s` (this server's per-call timeout; it wins over the run's
`tool_timeout_s`), `protocol` (`legacy`, the default, uses `initialize`, on which a server's own
requests work however it sends them; `auto` probes the 2026 handshake first), `sampling` (the server may use the run's model), `oauth` (log in with `boundloop auth NAME`), `root` and `path_arguments` (where the server's files live on this host and which
arguments of its tools name them, so path rules match resolved paths; our own servers need
neither: their `--root` and their schemas say it). The common `type` key is accepted
(`stdio`, `http`, `streamable-http`) and must agree with command/url. Top-level keys other than
`mcpServers` are ignored, so an existing desktop-client config file can be pointed at as is.
`${VAR}` and `${VAR:-default}` are expanded in `args`, `env` and `headers` only; a bare `$VAR`
is left alone. Every problem is collected and reported together, each with its fix.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from boundloop.tools.errors import ConfigError, ToolsError
from boundloop.tools.secrets import Redactor

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})


class ServerConfig(BaseModel):
    """One configured MCP server: a stdio command or a streamable-HTTP URL."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """The key in `mcpServers`; it prefixes the server's tool names (`<name>__<tool>`)."""
    type: Literal["stdio", "http", "streamable-http", "streamable_http", "streamableHttp"] | None = None
    """Optional transport tag from the common shape; must agree with command/url."""
    command: str | None = None
    """Executable of a stdio server. Prefer the real binary (node path, venv script) over npx/uvx."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment; the server inherits only HOME, LOGNAME, PATH, SHELL, TERM, USER besides these."""
    cwd: str | None = None
    url: str | None = None
    """Streamable-HTTP endpoint, e.g. `http://127.0.0.1:8765/mcp`."""
    headers: dict[str, str] = Field(default_factory=dict)
    trusted: bool = False
    """Whether this server's tool annotations may relax a permission decision."""
    trusted_output: bool = False
    """Whether what this server's tools return may be read without tainting the run (tools/authority.py):
    only for a server whose results nobody but you can write. Separate from `trusted`, which is about annotations."""
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Timeout of one tool call on this server, in seconds; when set it wins over the run's
    `tool_timeout_s` (which applies to servers that set none)."""
    protocol: Literal["auto", "legacy"] = "legacy"
    """`legacy` (the default): the `initialize` handshake, on which a server may send its requests
    (elicitation, sampling, roots) the ordinary way, from inside a tool call. `auto`: try the 2026
    `server/discover` handshake first, falling back to `initialize`; on a 2026 connection a server can
    ask only through `input_required` rounds, so choose it for servers written that way."""
    root: str | None = None
    """Absolute directory on this host that the server resolves relative paths against. Without it
    (and without `--root` for our servers), path rules fail closed on this server's path arguments."""
    path_arguments: dict[str, list[str]] | list[str] | None = None
    """Tool-name glob → that tool's arguments holding paths, e.g. {"move_file": ["source",
    "destination"], "*": ["path"]}, or one list for every tool. Each is a top-level name or a JSON
    pointer, `*` standing for any key or list position (`/options/path`, `/files/*/path`). Without
    it, arguments named like paths (at any depth) are taken as paths."""
    shared: bool = False
    """Whether the runs of one process may share this server's session (tools/shared_sessions.py):
    only for a server that keeps no state between calls, or scopes it per call. Runs share it only
    when their whole config of it is identical (so one server per `--root`); never with `oauth` or `sampling`, whose login and model belong to a run."""
    oauth: bool = False
    """HTTP only: log in with OAuth (`boundloop auth NAME` once; tokens stored encrypted, refreshed, tools/oauth.py)."""
    sampling: bool = False
    """Whether this server may ask the run's model for completions (`sampling/createMessage`),
    charged to the run's budget; refused with an MCP error otherwise (tools/client_features.py)."""
    _substituted: tuple[str, ...] = PrivateAttr(default=())
    """What `${VAR}` references expanded to (tools/secrets.py treats these as secrets)."""

    @property
    def path_root(self) -> str | None:
        """`root`, or the `--root` our shipped servers are started with (relative to their cwd)."""
        if self.root is not None:
            return self.root
        if self.command is None or not _SHIPPED_MODULES.intersection(self.args):
            return None
        for flag, value in zip(self.args, self.args[1:]):
            if flag == "--root":
                return os.path.join(self.cwd or os.getcwd(), value)
        return next((os.path.join(self.cwd or os.getcwd(), arg[7:]) for arg in self.args if arg.startswith("--root=")), None)

    def declared_paths(self, tool: str) -> tuple[str, ...] | None:
        """The arguments `path_arguments` declares as paths for `tool` (every matching glob), or None."""
        if self.path_arguments is None:
            return None
        if isinstance(self.path_arguments, list):
            return tuple(dict.fromkeys(self.path_arguments))
        return tuple(dict.fromkeys(name for glob, names in self.path_arguments.items() if fnmatchcase(tool, glob) for name in names))

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """What we start or connect to, for messages and logs (header values and what `${VAR}`
        expanded to are never shown)."""
        if self.command is not None:
            return Redactor(self.secret_values()).text(" ".join([self.command, *self.args]))
        return str(self.url)

    def secret_values(self) -> list[str]:
        """Every `env` and `headers` value, and every value a `${VAR}` reference expanded to."""
        return [*self.env.values(), *self.headers.values(), *self._substituted]

    @model_validator(mode="after")
    def _one_transport(self) -> "ServerConfig":
        if self.command is not None and self.url is not None:
            raise ValueError("has both 'command' and 'url'; keep 'command' for a stdio server or 'url' for an HTTP one")
        if self.command is None and self.url is None:
            raise ValueError("has neither 'command' nor 'url'; add 'command' (stdio) or 'url' (streamable HTTP)")
        if self.command is not None:
            if not self.command.strip():
                raise ValueError("has an empty 'command'; give the path of the server executable")
            if self.headers:
                raise ValueError("has 'headers' but is a stdio server; headers only apply with 'url'")
            if self.oauth:
                raise ValueError("has 'oauth' but is a stdio server; OAuth only applies with 'url' (a stdio server takes its credentials from env)")
            if self.type not in (None, "stdio"):
                raise ValueError(f"has type {self.type!r} but a 'command'; use type 'stdio' or replace command by url")
        else:
            if not str(self.url).startswith(("http://", "https://")):
                raise ValueError(f"has url {self.url!r}; give an http:// or https:// endpoint such as http://127.0.0.1:8765/mcp")
            stray = [key for key in ("args", "env", "cwd") if getattr(self, key)]
            if stray:
                raise ValueError(f"has {', '.join(map(repr, stray))} but is an HTTP server; these only apply with 'command'")
            if self.type not in (None, *_HTTP_TYPES):
                raise ValueError(f"has type {self.type!r} but a 'url'; use type 'http' or replace url by command")
        declared = self.path_arguments if isinstance(self.path_arguments, list) else [
            name for names in (self.path_arguments or {}).values() for name in names]
        for name in declared:
            if not name or (not name.startswith("/") and "/" in name):
                raise ValueError(f"has path argument {name!r}; give an argument's name (`path`) or a JSON pointer from the arguments (`/options/path`, `/files/*/path`)")
        if self.root is not None and not os.path.isabs(self.root):
            raise ValueError(f"has root {self.root!r}; give the absolute directory the server serves, as seen from this host")
        return self


_KNOWN_KEYS = sorted(set(ServerConfig.model_fields) - {"name"})
_SHIPPED_MODULES = frozenset({"boundloop.mcp_servers.workspace", "boundloop.mcp_servers.sandbox"})
"""Our servers that take `--root`; `python -m <module> --root DIR` tells where their files are."""


def load_servers(source: str | Path | Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> dict[str, ServerConfig]:
    """Read and validate the `mcpServers` config from a JSON file path or an already-parsed dict.

    `environ` is where `${VAR}` comes from (default: this process's environment).
    Raises ConfigError listing every problem, each as `where: what (got value). fix`.
    """
    document, label = read_json_object(source, "MCP server config", ConfigError)
    servers = document.get("mcpServers")
    if not isinstance(servers, dict):
        got = "nothing" if servers is None else f"{type(servers).__name__} {_short(servers)}"
        raise ConfigError(
            f"{label}: 'mcpServers' must be an object of named servers (got {got}). "
            'Write {"mcpServers": {"time": {"command": "/abs/path/mcp-server-time"}}}.'
        )
    env = os.environ if environ is None else environ
    problems: list[str] = []
    configs: dict[str, ServerConfig] = {}
    for name, entry in servers.items():
        where = f"{label}: mcpServers.{name}"
        config = _parse_server(name, entry, env, where, problems)
        if config is not None:
            configs[name] = config
    if problems:
        raise ConfigError("\n".join(problems))
    return configs


def read_json_object(
    source: str | Path | Mapping[str, Any], what: str, error: type[ToolsError]
) -> tuple[dict[str, Any], str]:
    """Load a user JSON file (or take a dict) that must hold one object; return it and a label for messages."""
    if isinstance(source, Mapping):
        return dict(source), what
    path = Path(source).expanduser()
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} not found: {label}. Create the file, or pass the path of an existing one.") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise error(f"{what} {label} cannot be read ({exc}). Point to a readable UTF-8 JSON file.") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{label} line {exc.lineno} column {exc.colno}: {exc.msg}. "
            "Fix the JSON there (JSON allows no comments and no trailing commas)."
        ) from None
    if not isinstance(document, dict):
        raise error(f"{label}: the top level must be a JSON object (got {type(document).__name__}).")
    return document, label


def _parse_server(name: str, entry: Any, environ: Mapping[str, str], where: str, problems: list[str]) -> ServerConfig | None:
    if not SERVER_NAME.fullmatch(name) or "__" in name:
        problems.append(
            f"{where}: server name {name!r} is not usable as a tool-name prefix. "
            "Use letters, digits, '_' and '-' only, without '__' (it separates server and tool)."
        )
        return None
    if not isinstance(entry, dict):
        problems.append(f"{where}: must be an object with 'command' or 'url' (got {type(entry).__name__} {_short(entry)}).")
        return None
    unknown = [key for key in entry if key not in _KNOWN_KEYS]
    for key in unknown:
        close = difflib.get_close_matches(key, _KNOWN_KEYS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(_KNOWN_KEYS)}."
        problems.append(f"{where}: unknown key {key!r}; {hint}")
    if entry.get("type") == "sse":
        problems.append(f"{where}: type 'sse' (HTTP+SSE, deprecated) is not supported; serve streamable HTTP and use its /mcp url.")
        return None
    if unknown:
        return None
    try:
        config = ServerConfig.model_validate({**entry, "name": name})
    except ValidationError as exc:
        problems.extend(_describe(where, error) for error in exc.errors())
        return None
    return _expand(config, environ, where, problems)


def _describe(where: str, error: Any) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    place = f"{where}.{loc}" if loc else where
    if error["type"] == "value_error":
        return f"{place} {str(error['ctx']['error'])}."
    return f"{place}: {error['msg']} (got {_short(error['input'])})."


def _expand(config: ServerConfig, environ: Mapping[str, str], where: str, problems: list[str]) -> ServerConfig | None:
    missing: list[str] = []
    substituted: list[str] = []

    def sub(text: str, field: str) -> str:
        def one(match: re.Match[str]) -> str:
            var, default = match.group(1), match.group(2)
            if var in environ:
                substituted.append(environ[var])
                return environ[var]
            if default is not None:
                return default
            missing.append(f"{where}.{field}: ${{{var}}} is not set. Export {var}, or write ${{{var}:-default}}.")
            return match.group(0)

        return _VAR.sub(one, text)

    expanded = config.model_copy(
        update={
            "args": [sub(arg, f"args[{i}]") for i, arg in enumerate(config.args)],
            "env": {key: sub(value, f"env.{key}") for key, value in config.env.items()},
            "headers": {key: sub(value, f"headers.{key}") for key, value in config.headers.items()},
        }
    )
    problems.extend(missing)
    if missing:
        return None
    expanded._substituted = tuple(substituted)
    return expanded


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
