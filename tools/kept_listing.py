"""kept_listing: when a run may pin the tools its servers listed for an earlier run, instead of
waiting for them to start and list again.

A short run's first model request needs only the tool definitions, not a live server. For a set of
servers that are all `trusted`, the listing a run got is kept in PostgreSQL
(checkpoints/tool_listings.py) under a hash of their configs (environment and header names, not
their values) and boundloop's version; the next run with the very same configs pins that listing at
intake, sends its first request, and starts the servers meanwhile. The run's first model step then
waits for the servers and compares their live listing with the kept one: the same, and the pins
stand; different, and the reply made from the kept definitions is dropped unsent, the live listing
is pinned and kept, and the model is asked again. A server that does not start ends the run there,
before any call. Every call is checked against the live definition before dispatch as always
(tools/pinning.py), so a kept listing can make a run ask the model twice, never send a call the
server no longer defines that way.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from importlib import metadata

from boundloop.tools import pinning
from boundloop.tools.config import ServerConfig

KEPT = "pinned the listing kept from an earlier run on the same servers: the first model request went out while they started"
LISTED_FOR_FIRST_REQUEST = ("listed by the servers at intake: the first model request is the planner's or offers hosted tools, "
                            "and waits for them")
LISTED_UNTRUSTED = "listed by the servers at intake: a listing is kept only when every server is trusted"
LISTED_NONE_KEPT = "listed by the servers at intake: no usable listing kept for these servers (none yet, older than a day, or damaged)"
CONFIRMED = "; the live listing matched it"
REPLACED = "; the live listing differed: the reply made from the kept one was dropped unsent and the actor asked again"
UNCHECKED = "; not yet checked against the live listing (the servers had not come up)"
MAX_AGE_S = 24 * 3600.0
"""How old a kept listing may be and still be pinned. A server whose code changes without a config
change is caught by the live comparison either way; this only bounds how often that costs a re-ask."""


def servers_key(configs: Mapping[str, ServerConfig]) -> str | None:
    """The key a listing of these servers is kept under, or None when one of them is not trusted
    (an untrusted server's listing is always asked of it)."""
    if not configs or not all(config.trusted for config in configs.values()):
        return None
    described = [{**config.model_dump(mode="json", exclude={"env", "headers"}), "env": sorted(config.env), "headers": sorted(config.headers)}
                 for _, config in sorted(configs.items())]  # names only: no hash of a secret's value is ever stored
    text = json.dumps({"boundloop": _version(), "servers": described}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def usable(pins: object) -> bool:
    """Whether a kept row is pins a run can be given: a version and specs a registry is built from.
    Anything else (a row damaged or written by hand) is passed over, and the servers are asked."""
    try:
        return isinstance(pins, dict) and isinstance(pins["version"], str) and bool(pinning.registry_of(pins).specs())
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


@functools.cache
def _version() -> str:
    return metadata.version("boundloop")  # reads the installed metadata: once per process
