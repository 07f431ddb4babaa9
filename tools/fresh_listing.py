"""fresh_listing: when a server's last tool listing may answer the check before a read.

The check before each call (tools/pinning.py) asks the server for its tools again. A server may
say how long its list stays as it is: MCP's caching hint `ttlMs` on a `tools/list` result (the
2026-07-28 protocol; our own servers give one, mcp_servers/_shipped.py). For a trusted server,
the listing it answered then stands in for asking again before a read-only call until that time
is up, and never longer than MAX_FRESH_S. An untrusted server's hint is not taken, as its
annotations are not, and a call with side effects is always checked against a listing asked for
it. A listing stops standing as soon as the server announces `tools/list_changed`, and a
reconnect replaces it with the new process's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

MAX_FRESH_S = 10.0
"""The longest a listing stands in for asking again, whatever the server's hint: how long a trusted
server that changed a tool without saying so can still be called as pinned."""

Tools = TypeVar("Tools")


class FreshListing(Generic[Tools]):
    """One server's last listing and until when it stands (monotonic seconds)."""

    def __init__(self, *, trusted: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self._trusted = trusted
        self._clock = clock
        self._tools: Tools | None = None
        self._until = 0.0
        self._generation = 0
        """Counts `forget()`s: a listing asked before one is not kept after it."""

    def ask(self) -> tuple[int, float]:
        """Taken just before a listing is requested; give it back to `keep`."""
        return self._generation, self._clock()

    def keep(self, tools: Tools, ttl_ms: int, asked: tuple[int, float]) -> None:
        """Let `tools` stand for `ttl_ms` from when it was asked (capped), if the server is trusted
        and nothing made listings stale since it was asked."""
        generation, asked_at = asked
        if self._trusted and ttl_ms > 0 and generation == self._generation:
            self._tools, self._until = tools, asked_at + min(ttl_ms / 1000, MAX_FRESH_S)

    def standing(self) -> Tools | None:
        """The listing that still stands, or None: then the server must be asked."""
        if self._tools is not None and self._clock() < self._until:
            return self._tools
        return None

    def forget(self) -> None:
        """The server's tools may have changed: the next check asks it."""
        self._generation += 1
        self._tools, self._until = None, 0.0
