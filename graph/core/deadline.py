"""deadline: when the run's wall-clock budget runs out, for the step in flight.

The wall-clock budget is charged after each step, so a check before the step cannot stop a model
or tool call that hangs inside it. The node wrappers (graph/builder.py) therefore open a deadline
for the step — now plus the seconds the budget has left, less a small reserve for the bookkeeping
that follows a cut (`reserve_s`) — and every model call (graph/models/catalog.py)
and tool call (tools/dispatch.py) made inside the step waits at most until then. Kept in a
context variable because the step's asyncio task is where both kinds of call run; outside a step
(or with no wall-clock limit) there is no deadline.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from collections.abc import Mapping
from typing import Any, Iterator

_DEADLINE: ContextVar[float | None] = ContextVar("boundloop_deadline", default=None)


def reserve_s(limit: float) -> float:
    """Seconds kept back from a step's deadline for the bookkeeping after a cut (saving the step,
    closing servers), which is charged too: so what is charged stays within the limit."""
    return min(RESERVE_S, RESERVE_SHARE * limit)


RESERVE_S = 2.0
RESERVE_SHARE = 0.25


def budget_left_s(budget: Mapping[str, Any] | None, usage: Mapping[str, Any] | None) -> float | None:
    """Seconds a step may run: the wall-clock budget not yet charged, less the bookkeeping reserve
    (None: no limit)."""
    limit = (budget or {}).get("wall_clock_s")
    if limit is None:
        return None
    return max(limit - (usage or {}).get("wall_clock_s", 0) - reserve_s(limit), 0.0)


@contextmanager
def step_deadline(left_s: float | None) -> Iterator[None]:
    """Calls inside this block end by now + `left_s` (no deadline when None)."""
    token = _DEADLINE.set(None if left_s is None else time.monotonic() + left_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def seconds_left() -> float | None:
    """Seconds until the step's deadline, never negative (None: no deadline)."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def bound(timeout_s: float) -> float:
    """A call's timeout, shortened so that the call cannot outlive the deadline."""
    left = seconds_left()
    return timeout_s if left is None else min(timeout_s, left)


def passed() -> bool:
    left = seconds_left()
    return left is not None and left <= 0
