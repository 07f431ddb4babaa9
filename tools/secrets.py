"""secrets: keep credentials out of everything boundloop writes down or shows a model.

What counts as a secret: the values of a server's `env` and `headers`, whatever a `${VAR}`
reference in the server config expands to, and the values of this process's environment
variables whose names say they are credentials (`OPENAI_API_KEY`, `GITHUB_TOKEN`, `PGPASSWORD`...).

Two ways they are kept out:
- by key: where a config is written out, every `env`/`headers` value and every key named like a
  credential (`api_key`, `authorization`, `password`...) becomes `PLACEHOLDER`;
- by value: text that may quote a secret (tool results, server stderr, error messages, log lines,
  trace events) has each secret value of at least `MIN_SECRET_CHARS` characters replaced by
  `PLACEHOLDER`. Shorter values ("1", "UTC") are not looked for: they would mask ordinary text.

And one rule keeps them out of checkpoints: run settings never hold a literal `env` or `headers`
value (`literal_secrets` finds them); they hold `${VAR}` references, or the path of a servers file,
resolved when a server starts.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

PLACEHOLDER = "***"
MIN_SECRET_CHARS = 8
SECRET_NAME = re.compile(r"(api_?key|token|secret|passw(or)?d|credentials?|authorization|cookie)$", re.IGNORECASE)
"""A variable or key named like this holds a credential (matched at the end: `GITHUB_TOKEN`, `api_key`)."""
SECRET_BEARING_KEYS = frozenset({"env", "headers"})
"""Config keys whose every value is a secret."""
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")


class Redactor:
    """Replaces known secret values in text and in JSON-like values."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = sorted({value for value in values if len(value) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, kept))) if kept else None

    @classmethod
    def for_servers(cls, configs: Iterable[Any], environ: Mapping[str, str] | None = None) -> "Redactor":
        """Secrets of these server configs (`ServerConfig.secret_values()`) and of the process environment."""
        values = [value for config in configs for value in config.secret_values()]
        return cls([*values, *environment_secrets(environ)])

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        return self._pattern.sub(PLACEHOLDER, text) if self._pattern is not None and text else text

    def value(self, value: Any) -> Any:
        """`value` with every string in it (keys included) redacted; containers are copied."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.value(key): self.value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        return value


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment variables named like credentials (of this process's environment
    as it is now, unless `environ` is given)."""
    if environ is not None:
        return _scan(environ)
    return list(_environment()[1])


def _scan(environ: Mapping[str, str]) -> list[str]:
    return [value for name, value in environ.items() if SECRET_NAME.search(name) and value]


_SCANNED: tuple[dict[Any, Any], list[str], Redactor] | None = None
"""The process environment as last scanned (its raw copy), its secrets, and their redactor."""


def _environment() -> tuple[dict[Any, Any], list[str], Redactor]:
    """The process environment's secrets and their redactor, scanned again only when the environment
    changed: every trace event is redacted, and decoding and matching every variable for each one
    cost more than the event. `os.environ` keeps its raw mapping in `_data` (updated by every
    assignment and deletion, as `os.environ` itself is); comparing it with the copy taken at the last
    scan is a dict comparison. Without it (another Python), the environment is scanned every time."""
    global _SCANNED
    raw = getattr(os.environ, "_data", None)
    scanned = _SCANNED
    if isinstance(raw, dict) and scanned is not None and scanned[0] == raw:
        return scanned
    copy = dict(raw) if isinstance(raw, dict) else {}
    values = _scan(os.environ)
    scanned = (copy, values, Redactor(values))
    if isinstance(raw, dict):
        _SCANNED = scanned
    return scanned


def redact_keys(value: Any) -> Any:
    """A copy of `value` with secret-bearing entries (`env`, `headers`, keys named like credentials)
    replaced by PLACEHOLDER. `${VAR}` references are not secrets and stay readable."""
    if isinstance(value, Mapping):
        redacted: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and key in SECRET_BEARING_KEYS and isinstance(item, Mapping):
                redacted[key] = {name: _placeholder(entry) for name, entry in item.items()}
            elif isinstance(key, str) and SECRET_NAME.search(key) and item is not None:
                redacted[key] = _placeholder(item)
            else:
                redacted[key] = redact_keys(item)
        return redacted
    if isinstance(value, (list, tuple)):
        return [redact_keys(item) for item in value]
    return value


def redact(value: Any, redactor: Redactor | None = None) -> Any:
    """By key, then by value (the process environment's secrets unless a redactor is given)."""
    return (redactor or _environment()[2]).value(redact_keys(value))


def literal_secrets(servers: Mapping[str, Any]) -> list[str]:
    """Where an inline `mcpServers` document holds a literal `env` or `headers` value (one that uses no
    `${VAR}` reference), as `mcpServers.<server>.<env|headers>.<name>`; the values are never named."""
    found: list[str] = []
    entries = servers.get("mcpServers")
    if not isinstance(entries, Mapping):
        return found
    for server, entry in entries.items():
        if not isinstance(entry, Mapping):
            continue
        for key in sorted(SECRET_BEARING_KEYS):
            values = entry.get(key)
            if isinstance(values, Mapping):
                found.extend(f"mcpServers.{server}.{key}.{name}" for name, value in values.items()
                             if not (isinstance(value, str) and _REFERENCE.search(value)))
    return found


def _placeholder(value: Any) -> Any:
    return value if isinstance(value, str) and _REFERENCE.fullmatch(value.strip()) else PLACEHOLDER
