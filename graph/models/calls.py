"""model_calls: one model request under our own timeout, deadline, retry policy and circuit breaker.

The provider client is built with `max_retries=0`, so every attempt is ours to see and count:

- each attempt waits at most `model_timeout_s`, and never past the step's deadline (graph/core/deadline.py);
- only transient failures are retried — a timeout, a connection that failed, HTTP 408, 409, 429
  or 5xx, an answer that is not JSON — with exponential backoff and full jitter, uniform(0, min(8, 0.5 * 2**(n-1))) seconds;
- each retry is charged to `budget.retries` (shared with tool retries) and written to the trace;
- each failed attempt advances the model's circuit (`model:<model id>` in the run's breaker state,
  tools/breakers.py: open after 3 consecutive failures, a probe after 30 s); an open circuit
  refuses the call before anything is sent.

A call that cannot be made raises `ModelCallFailed`: `DeadlineReached` when the wall-clock budget
ran out, `ModelUnavailable` when the provider is down or refuses (a 4xx other than 408/409/429
is not retried: repeating it gets the same answer). Anything else — a bug, a scripted model out
of steps — propagates unchanged. Never decides how the run ends; graph/models/catalog.py does.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from boundloop.graph.core import deadline
from boundloop.tools import breakers

BASE_DELAY_S = 0.5
MAX_DELAY_S = 8.0
RETRYABLE_HTTP = frozenset({408, 409, 429})

OnRetry = Callable[[int, str, float], Awaitable[None]]
"""Called before each retry with (retry number, why the attempt failed, backoff seconds)."""


@dataclass
class Attempts:
    """What the attempts of one call spent, to charge whatever the outcome."""

    retries: int = 0
    breakers: dict[str, Any] | None = None
    """The run's breaker state after the call, when the model's circuit changed."""


class ModelCallFailed(Exception):
    def __init__(self, reason: str, attempts: Attempts) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class ModelUnavailable(ModelCallFailed):
    """The provider is down, overloaded past our retries, refusing, or its circuit is open."""


class DeadlineReached(ModelCallFailed):
    """The run's wall-clock budget ran out before the model answered."""


@dataclass(frozen=True)
class _Failure:
    reason: str
    retryable: bool


async def invoke(
    request: Callable[[], Awaitable[Any]],
    *,
    circuit: str,
    breaker_state: dict[str, Any],
    retries_left: int | None,
    timeout_s: float,
    on_retry: OnRetry,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> tuple[Any, Attempts]:
    """Await `request()` until it answers, or raise `ModelCallFailed` (see the module docstring)."""
    rng = rng or random.Random()
    spent = Attempts()
    state = breaker_state
    if breakers.circuit_state(state, circuit, time.time()) == "open":
        raise ModelUnavailable(_open_reason(state, circuit), spent)
    while True:
        left = deadline.seconds_left()
        if left is not None and left <= 0:
            raise DeadlineReached("the wall-clock budget ran out before the call", spent)
        try:
            async with asyncio.timeout(timeout_s if left is None else min(timeout_s, left)):
                reply = await request()
        except TimeoutError:
            if left is not None and left <= timeout_s:
                raise DeadlineReached("the call was still waiting for the model at the run's deadline", spent) from None
            failure = _Failure(f"no reply within {timeout_s:g} s (model_timeout_s)", retryable=True)
        except Exception as error:  # noqa: BLE001 (classified, or raised again unchanged)
            classified = classify(error)
            if classified is None:
                raise
            failure = classified
        else:
            if state.get("circuits", {}).get(circuit):
                spent.breakers = breakers.record_circuit(state, circuit, False, time.time())
            return reply, spent
        if not failure.retryable:
            raise ModelUnavailable(failure.reason, spent)
        state = spent.breakers = breakers.record_circuit(state, circuit, True, time.time())
        if breakers.circuit_state(state, circuit, time.time()) == "open":
            raise ModelUnavailable(f"{failure.reason}; {_open_reason(state, circuit)}", spent)
        if retries_left is not None and spent.retries >= retries_left:
            raise ModelUnavailable(f"{failure.reason}; no retries left in budget.retries", spent)
        delay = backoff_s(spent.retries + 1, rng)
        left = deadline.seconds_left()
        if left is not None and delay >= left:
            raise DeadlineReached(f"{failure.reason}; the run's deadline came before the next retry", spent)
        spent.retries += 1
        await on_retry(spent.retries, failure.reason, delay)
        await sleep(delay)


def backoff_s(retry: int, rng: random.Random) -> float:
    """Full jitter: uniform(0, min(MAX_DELAY_S, BASE_DELAY_S * 2**(retry-1)))."""
    return rng.uniform(0.0, min(MAX_DELAY_S, BASE_DELAY_S * 2 ** (retry - 1)))


def classify(error: BaseException) -> _Failure | None:
    """A provider failure and whether it is transient; None for errors that are not the provider's.
    An error of the openai client's means its module is loaded; when it is not, it is not imported
    (half a second) only to find that out."""
    openai = sys.modules.get("openai")
    unreadable: tuple[type[BaseException], ...] = (json.JSONDecodeError,)
    if openai is not None:
        if isinstance(error, openai.APITimeoutError):
            return _Failure("the request timed out", retryable=True)
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__ or error
            return _Failure(f"cannot reach the provider ({type(cause).__name__}: {str(cause)[:200]})", retryable=True)
        if isinstance(error, openai.APIStatusError):
            code = error.status_code
            return _Failure(f"HTTP {code} from the provider: {str(error.message)[:300]}", retryable=code in RETRYABLE_HTTP or code >= 500)
        unreadable += (openai.APIResponseValidationError,)
    if isinstance(error, unreadable):  # a 200 whose body is not an answer
        return _Failure(f"the provider's answer could not be read ({str(error)[:200]})", retryable=True)
    return None


def _open_reason(state: dict[str, Any], circuit: str) -> str:
    entry = state["circuits"][circuit]
    wait_s = max(entry["opened_at"] + breakers.DEFAULT_SETTINGS.cooldown_s - time.time(), 1.0)
    return f"circuit {circuit} is open after {entry['failures']} failures in a row; the next probe is allowed in {wait_s:.0f} s"
