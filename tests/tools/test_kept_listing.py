"""Which servers' listing may be kept, and under what key: the key follows what starts the servers,
never stores a secret's value, and does not exist for an untrusted server."""

from __future__ import annotations

from typing import Any

import json

from boundloop.tools import pinning
from boundloop.tools.config import load_servers
from boundloop.tools.kept_listing import servers_key, usable
from boundloop.tools.registry import ToolSpec


def key(**entry: Any) -> str | None:
    base = {"command": "/usr/bin/server", "args": ["--root", "/srv"], "trusted": True}
    return servers_key(load_servers({"mcpServers": {"files": {**base, **entry}}}))


def test_the_key_follows_what_starts_the_server_and_not_a_secrets_value():
    plain = key(env={"TOKEN": "s3cret-one"})
    assert plain is not None and len(plain) == 64
    assert key(env={"TOKEN": "another-secret"}) == plain  # a rotated secret is the same server
    assert key(env={"OTHER": "s3cret-one"}) != plain
    assert key(env={"TOKEN": "s3cret-one"}, args=["--root", "/elsewhere"]) != plain
    assert key(env={"TOKEN": "s3cret-one"}, command="/usr/bin/other") != plain


def test_an_untrusted_server_anywhere_in_the_set_means_no_key():
    assert key(trusted=False) is None
    both = {"a": {"command": "/bin/a", "trusted": True}, "b": {"command": "/bin/b"}}
    assert servers_key(load_servers({"mcpServers": both})) is None
    assert servers_key({}) is None


def test_only_pins_a_registry_can_be_built_from_are_usable():
    pins = json.loads(json.dumps(pinning.pin([ToolSpec("files", "read", "Read a file.", {"type": "object"})])))  # as stored: JSON
    assert usable(pins)
    assert not usable(None) and not usable([]) and not usable({"version": "v"}) and not usable({**pins, "specs": []})
    assert not usable({**pins, "version": 3})
    assert not usable({**pins, "specs": [{"name": "x"}]})
    assert not usable({**pins, "specs": "\u0000"})
