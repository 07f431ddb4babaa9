"""tokens: the signed, single-use token every decision form carries.

A token binds one decision to what the approver was shown: the run, the call id, the argument
hash and the interrupt id, plus a random nonce and its issue time, signed with HMAC-SHA256 under
the console's key. A form whose token was altered, or whose bound fields were (a different call,
other arguments), fails the signature; a token is used once (its nonce is remembered until it
expires) and refused after `TOKEN_TTL_S`. The signature also makes the form its own CSRF token:
another site cannot mint one. The database keeps each approval single use on its own
(checkpoints/approvals.py), across console processes and restarts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass

TOKEN_TTL_S = 3600.0
"""How long a rendered form stays usable."""


class TokenRefused(Exception):
    """A decision form that cannot be used; the message says why, for the page."""


@dataclass(frozen=True)
class Binding:
    """What a decision is for, exactly as the approver saw it."""

    run_id: str
    call_id: str
    args_hash: str
    interrupt_id: str


class Tokens:
    """Issues and checks tokens under one key; remembers the nonces already used."""

    def __init__(self, key: bytes | None = None, ttl_s: float = TOKEN_TTL_S) -> None:
        self._key = key or secrets.token_bytes(32)
        self._ttl_s = ttl_s
        self._used: dict[str, float] = {}

    def issue(self, binding: Binding) -> str:
        body = json.dumps({**asdict(binding), "nonce": secrets.token_urlsafe(16), "at": time.time()}, separators=(",", ":"), sort_keys=True)
        return f"{_b64(body.encode())}.{_b64(self._sign(body.encode()))}"

    def use(self, token: str, claimed: Binding) -> Binding:
        """The binding of a valid, unused token that matches `claimed`; marks it used. `TokenRefused` otherwise."""
        body = self._verified(token)
        issued = json.loads(body)
        binding = Binding(**{key: issued[key] for key in ("run_id", "call_id", "args_hash", "interrupt_id")})
        if binding != claimed:
            raise TokenRefused("the form was altered: its token is for another call or other arguments; reload the inbox")
        now = time.time()
        if now - issued["at"] > self._ttl_s:
            raise TokenRefused("the form expired; reload the inbox for a fresh one")
        self._forget_expired(now)
        if issued["nonce"] in self._used:
            raise TokenRefused("this decision was already submitted once (a form is single use); reload the inbox")
        self._used[issued["nonce"]] = issued["at"]
        return binding

    def _verified(self, token: str) -> bytes:
        body_part, _, signature_part = token.partition(".")
        try:
            body, signature = _unb64(body_part), _unb64(signature_part)
        except ValueError:
            raise TokenRefused("the form's token is malformed; reload the inbox") from None
        if not hmac.compare_digest(signature, self._sign(body)):
            raise TokenRefused("the form's token does not verify (altered, or issued by another console); reload the inbox")
        return body

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def _forget_expired(self, now: float) -> None:
        for nonce in [nonce for nonce, at in self._used.items() if now - at > self._ttl_s]:
            del self._used[nonce]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as error:
        raise ValueError(str(error)) from None
