"""secrets: keep credentials out of everything boundloop writes down or shows a model.

What counts as a secret: the values of a server's `env` and `headers`, whatever a `${VAR}`
reference in the server config expands to (whatever the variable's name), and the values of this
process's environment variables whose names say they are credentials (`OPENAI_API_KEY`,
`GITHUB_TOKEN`, `GITHUB_PAT`, `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`...). The servers' values are
remembered for the process once a run's servers are configured (`remember`), so `redact` masks them
everywhere this process writes or shows, not only in the tool results of that run.

A value is matched in its common encodings too: any letter case, hex (lower and upper), URL-encoded
(`%XX`, `+` for space, every byte escaped), base64 and base64url (padded or not, at any of the three
byte alignments, so inside a longer encoded text too), each with zero-width characters or
whitespace allowed between its characters (a value split by joiners).

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

import base64
import os
import re
import threading
from typing import Any, Iterable, Mapping
from urllib.parse import quote, quote_plus

PLACEHOLDER = "***"
MIN_SECRET_CHARS = 8
SECRET_NAME = re.compile(r"(api_?key|token|secret|passw(or)?d|credentials?|authorization|cookie)$", re.IGNORECASE)
"""A variable or key named like this holds a credential (matched at the end: `GITHUB_TOKEN`, `api_key`)."""
ENV_SECRET_NAME = re.compile(
    r"(api_?key|token|secrets?|passw(or)?d|credentials?|authorization|cookie|(^|_)(key|pat|pass|passwd|auth|dsn))$"
    r"|secret|token|passw|private_?key|access_?key", re.IGNORECASE)
"""An environment variable named like this holds a credential (`AWS_SECRET_ACCESS_KEY`, `GITHUB_PAT`)."""
SECRET_BEARING_KEYS = frozenset({"env", "headers"})
"""Config keys whose every value is a secret."""
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")
JOINERS = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e\u034f"
"""Zero-width and invisible characters that may be put between a secret's characters."""
_JOINED = f"[\\s{JOINERS}]*"
_DROP_JOINERS = {ord(char): None for char in JOINERS}


def encodings(value: str) -> tuple[list[str], list[str]]:
    """The forms of `value` to look for: (matched in any letter case, matched exactly).

    Any case: the value, its hex, its URL encodings. Exactly: the base64 and base64url characters
    that only the value's bytes decide, at each of the three byte alignments, so the value is found
    inside a longer encoded text and with or without padding."""
    raw = value.encode("utf-8")
    any_case = [value, raw.hex(), quote(value, safe=""), quote_plus(value, safe=""), "".join(f"%{byte:02x}" for byte in raw)]
    exact = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        core = encoded[-(-8 * offset // 6): 8 * (offset + len(raw)) // 6]
        exact += [core, core.replace("+", "-").replace("/", "_")]
    return list(dict.fromkeys(any_case)), list(dict.fromkeys(exact))


def _squeezed(text: str) -> str:
    """`text` without joiners and whitespace."""
    return "".join(text.translate(_DROP_JOINERS).split())


def _joined(form: str) -> str:
    """A pattern for `form` with joiners allowed between its characters."""
    return _JOINED.join(re.escape(char) for char in form)


class Redactor:
    """Replaces known secret values in text and in JSON-like values."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = {value for value in values if len(value) >= MIN_SECRET_CHARS}
        any_case: set[str] = set()
        exact: set[str] = set()
        for value in kept:
            insensitive, sensitive = encodings(value)
            any_case.update(insensitive)
            exact.update(sensitive)
        alternatives = [f"(?i:{_joined(form)})" for form in sorted(any_case, key=len, reverse=True)]
        alternatives += [_joined(form) for form in sorted(exact - any_case, key=len, reverse=True)]
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None
        self._folded = tuple(_squeezed(form).lower() for form in any_case)
        self._exact = tuple(_squeezed(form) for form in exact - any_case)

    def _may_hold(self, text: str) -> bool:
        """Whether `text`, its joiners removed, contains a form at all: a plain substring search that
        spares the joiner-tolerant pattern the text that holds no secret (nearly all of it)."""
        squeezed = _squeezed(text)
        folded = squeezed.lower()
        return any(form in folded for form in self._folded) or any(form in squeezed for form in self._exact)

    @classmethod
    def for_servers(cls, configs: Iterable[Any], environ: Mapping[str, str] | None = None) -> "Redactor":
        """Secrets of these server configs (`ServerConfig.secret_values()`) and of the process
        environment; the configs' values are remembered for `redact` too."""
        values = [value for config in configs for value in config.secret_values()]
        remember(values)
        return cls([*values, *environment_secrets(environ)])

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None or not text or not self._may_hold(text):
            return text
        return self._pattern.sub(PLACEHOLDER, text)

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
    return [value for name, value in environ.items() if ENV_SECRET_NAME.search(name) and value]


_SCANNED: tuple[dict[Any, Any], list[str], Redactor] | None = None
"""The process environment as last scanned (its raw copy), its secrets, and their redactor."""
_REMEMBERED: frozenset[str] = frozenset()
"""Values the servers of this process's runs were configured with (`remember`)."""
_REMEMBER_LOCK = threading.Lock()


def remember(values: Iterable[str]) -> None:
    """Mask these values (a run's configured server secrets) in everything `redact` and `mask` see
    from now on in this process, whatever variable they came from."""
    global _REMEMBERED, _SCANNED
    new = {value for value in values if len(value) >= MIN_SECRET_CHARS} - _REMEMBERED
    if new:
        with _REMEMBER_LOCK:
            _REMEMBERED = _REMEMBERED | new
            _SCANNED = None


def mask(value: Any) -> Any:
    """`value` with every known secret (environment and remembered) masked by value, keys kept."""
    return _environment()[2].value(value)


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
    scanned = (copy, values, Redactor([*values, *_REMEMBERED]))
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
