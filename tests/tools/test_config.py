"""tools/config.py: the mcpServers file, ${VAR} expansion, and one clear message per mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from boundloop.tools.config import load_servers
from boundloop.tools.errors import ConfigError


def test_stdio_and_http_servers_load_with_our_keys_and_defaults() -> None:
    """A stdio and an HTTP entry become ServerConfigs; unset keys take the documented defaults."""
    servers = load_servers({"mcpServers": {
        "time": {"command": "/venv/bin/mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "notes": {"url": "http://127.0.0.1:8765/mcp", "headers": {"X-Key": "k"}, "trusted": True,
                  "timeout_s": 5, "protocol": "auto", "type": "http"},
    }})
    assert servers["time"].transport == "stdio"
    assert (servers["time"].trusted, servers["time"].timeout_s, servers["time"].protocol) == (False, None, "legacy")
    assert servers["time"].target == "/venv/bin/mcp-server-time --local-timezone UTC"
    assert servers["notes"].transport == "http"
    assert (servers["notes"].trusted, servers["notes"].timeout_s, servers["notes"].protocol) == (True, 5.0, "auto")


def test_variables_expand_in_args_env_and_headers_with_defaults() -> None:
    """${VAR} comes from the given environment; ${VAR:-x} falls back to x; a bare $VAR stays."""
    servers = load_servers({"mcpServers": {
        "s": {"command": "/bin/s", "args": ["--root", "${ROOT}", "$HOME"], "env": {"TZ": "${TZ:-UTC}"}},
        "h": {"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
    }}, environ={"ROOT": "/data", "TOKEN": "t0k"})
    assert servers["s"].args == ["--root", "/data", "$HOME"]
    assert servers["s"].env == {"TZ": "UTC"}
    assert servers["h"].headers == {"Authorization": "Bearer t0k"}


def test_a_config_file_is_read_from_disk(tmp_path: Path) -> None:
    """The same shape is accepted from a JSON file; other top-level keys are ignored."""
    path = tmp_path / "servers.json"
    path.write_text('{"globalShortcut": "x", "mcpServers": {"time": {"command": "/bin/t"}}}')
    assert list(load_servers(path)) == ["time"]


def test_missing_file_names_the_path_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_servers(path)
    assert str(info.value) == f"MCP server config not found: {path}. Create the file, or pass the path of an existing one."


def test_bad_json_gives_line_and_column(tmp_path: Path) -> None:
    """A trailing comma is reported at its line and column with the JSON rule that forbids it."""
    path = tmp_path / "servers.json"
    path.write_text('{\n  "mcpServers": {\n    "t": {"command": "/bin/t",}\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_servers(path)
    assert str(info.value) == (
        f"{path} line 3 column 31: Expecting property name enclosed in double quotes. "
        "Fix the JSON there (JSON allows no comments and no trailing commas)."
    )


PREFIX = "MCP server config: mcpServers.s"


@pytest.mark.parametrize(("entry", "message"), [
    ({"command": "/bin/s", "url": "http://h/mcp"},
     f"{PREFIX} has both 'command' and 'url'; keep 'command' for a stdio server or 'url' for an HTTP one."),
    ({"args": ["x"]},
     f"{PREFIX} has neither 'command' nor 'url'; add 'command' (stdio) or 'url' (streamable HTTP)."),
    ({"comand": "/bin/s"},
     f"{PREFIX}: unknown key 'comand'; did you mean 'command'?"),
    ({"command": "/bin/s", "colour": "red"},
     f"{PREFIX}: unknown key 'colour'; known keys: args, command, cwd, env, headers, oauth, path_arguments, protocol, root, sampling, shared, timeout_s, trusted, trusted_output, type, url."),
    ({"command": "/bin/s", "timeout_s": 0},
     f"{PREFIX}.timeout_s: Input should be greater than 0 (got 0)."),
    ({"command": "/bin/s", "protocol": "2026"},
     f"{PREFIX}.protocol: Input should be 'auto' or 'legacy' (got '2026')."),
    ({"command": "/bin/s", "args": "--flag"},
     f"{PREFIX}.args: Input should be a valid list (got '--flag')."),
    ({"command": "/bin/s", "headers": {"A": "b"}},
     f"{PREFIX} has 'headers' but is a stdio server; headers only apply with 'url'."),
    ({"url": "http://h/mcp", "args": ["x"]},
     f"{PREFIX} has 'args' but is an HTTP server; these only apply with 'command'."),
    ({"url": "ftp://h/mcp"},
     f"{PREFIX} has url 'ftp://h/mcp'; give an http:// or https:// endpoint such as http://127.0.0.1:8765/mcp."),
    ({"url": "http://h/sse", "type": "sse"},
     f"{PREFIX}: type 'sse' (HTTP+SSE, deprecated) is not supported; serve streamable HTTP and use its /mcp url."),
    ({"command": "/bin/s", "args": ["${NOT_SET_ANYWHERE}"]},
     f"{PREFIX}.args[0]: ${{NOT_SET_ANYWHERE}} is not set. Export NOT_SET_ANYWHERE, or write ${{NOT_SET_ANYWHERE:-default}}."),
    ("just a string",
     f"{PREFIX}: must be an object with 'command' or 'url' (got str 'just a string')."),
])
def test_each_malformed_entry_gets_its_message(entry: Any, message: str) -> None:
    """The message names the server and key, the value, and what to write instead."""
    with pytest.raises(ConfigError) as info:
        load_servers({"mcpServers": {"s": entry}}, environ={})
    assert str(info.value) == message


@pytest.mark.parametrize("name", ["has space", "a__b", "dots.not.ok", ""])
def test_server_names_must_work_as_tool_name_prefixes(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_servers({"mcpServers": {name: {"command": "/bin/s"}}})
    assert str(info.value) == (
        f"MCP server config: mcpServers.{name}: server name {name!r} is not usable as a tool-name prefix. "
        "Use letters, digits, '_' and '-' only, without '__' (it separates server and tool)."
    )


def test_every_problem_is_reported_at_once() -> None:
    """Two broken servers give two lines, so one edit round fixes the file."""
    with pytest.raises(ConfigError) as info:
        load_servers({"mcpServers": {"a": {}, "b": {"command": "/bin/b", "trusted": "maybe"}}})
    assert str(info.value).splitlines() == [
        "MCP server config: mcpServers.a has neither 'command' nor 'url'; add 'command' (stdio) or 'url' (streamable HTTP).",
        "MCP server config: mcpServers.b.trusted: Input should be a valid boolean, unable to interpret input (got 'maybe').",
    ]


def test_missing_mcpservers_key_shows_the_expected_shape() -> None:
    with pytest.raises(ConfigError) as info:
        load_servers({"servers": {}})
    assert str(info.value) == (
        "MCP server config: 'mcpServers' must be an object of named servers (got nothing). "
        'Write {"mcpServers": {"time": {"command": "/abs/path/mcp-server-time"}}}.'
    )
