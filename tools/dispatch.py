"""dispatch: run one permitted call through the bridge, retrying only what is safe to retry.

Owns the retry rule with its backoff, and `bound_text`, the head-and-tail excerpt a long result
is cut to before the model sees it. Never decides permission or budget (the caller passes
`max_attempts` out of the retry budget) and never stores payloads (the caller keeps the full
text; the excerpt only says that it did).

Retry rule: a call is retried only when running it twice has the effect of running it once,
i.e. the tool is read-only or idempotent, *and* that claim comes from a trusted server (an
untrusted server's hint may not relax anything, and a retry is a relaxation). Only `timeout`
and `server_unavailable` are retried; a `tool_error` is an answer, not a transient. A server
the bridge already knows to be down (nothing was dispatched) is not waited for, and a retry that
is not sent (the server cannot be reached, or the check before it refuses: tools/pinning.py)
ends the retries with the outcome of the last attempt that was sent, since that attempt's
effect, if any, is what stays unknown. Delays are
exponential with full jitter: uniform(0, min(max_delay_s, base_delay_s * 2**(n-1))).
No attempt outlives the run's deadline (graph/core/deadline.py): its timeout is the smaller of the
tool's and the wall-clock budget left, and no retry starts once the deadline has passed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any, Awaitable, Callable, Protocol

from boundloop.graph.core import deadline
from boundloop.tools.bridge import ProgressFn
from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolSpec

RETRYABLE_STATUSES = frozenset({"timeout", "server_unavailable"})
BASE_DELAY_S = 0.5
MAX_DELAY_S = 8.0
MIN_BOUND_CHARS = 200

# Model-facing text: where the excerpt was cut, and that nothing is lost.
CUT_MARKER = "\n[... {cut} of {total} characters cut here; the full output is stored. Ask for a narrower part if you need it ...]\n"


class CallsTools(Protocol):
    """What dispatch needs of the bridge (MCPBridge fits)."""

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any] | None, *, timeout_s: float, on_progress: ProgressFn | None = None
    ) -> CallOutcome: ...


def is_retryable(spec: ToolSpec) -> bool:
    """Whether a failed attempt of this tool may be repeated (see the module docstring)."""
    return spec.trusted and (spec.hints.read_only or spec.hints.idempotent)


async def call_with_retry(
    bridge: CallsTools,
    spec: ToolSpec,
    arguments: dict[str, Any],
    *,
    timeout_s: float,
    max_attempts: int,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
    on_progress: ProgressFn | None = None,
    base_delay_s: float = BASE_DELAY_S,
    max_delay_s: float = MAX_DELAY_S,
) -> CallOutcome:
    """Call `spec` until it gives a non-transient outcome or the attempts run out.

    The outcome is the last sent attempt's, with `attempts` = calls actually dispatched and
    `latency_ms` = time spent in the tool over all attempts (backoff sleeps excluded).
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1 (got {max_attempts}); pass 1 for no retries")
    rng = rng or random.Random()
    allowed = max_attempts if is_retryable(spec) else 1
    dispatched, latency_ms = 0, 0.0
    for attempt in range(1, allowed + 1):
        latest = await bridge.call(spec.server, spec.name, arguments, timeout_s=deadline.bound(timeout_s), on_progress=on_progress)
        if latest.attempts == 0 and dispatched > 0:
            outcome = dataclasses.replace(outcome, detail=f"{outcome.detail}; the retry was not sent: {latest.detail or latest.status}")
            break
        outcome = latest
        dispatched += outcome.attempts
        latency_ms += outcome.latency_ms
        if outcome.status not in RETRYABLE_STATUSES or outcome.attempts == 0 or attempt == allowed or deadline.passed():
            break
        await sleep(rng.uniform(0.0, min(max_delay_s, base_delay_s * 2 ** (attempt - 1))))
    detail = outcome.detail if attempt == 1 else f"{outcome.detail} (after {attempt} attempts)"
    return dataclasses.replace(outcome, attempts=dispatched, latency_ms=latency_ms, detail=detail)


def bound_text(text: str, max_chars: int) -> tuple[str, bool]:
    """`text` if it fits in `max_chars`; otherwise its head and tail around a marker that says how
    much was cut and that the full output is stored. The excerpt never exceeds `max_chars`."""
    if max_chars < MIN_BOUND_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_BOUND_CHARS} (got {max_chars}) to leave room for the cut marker")
    total = len(text)
    if total <= max_chars:
        return text, False
    # Reserve room for the longest marker this text can need, then split what is left.
    keep = max_chars - len(CUT_MARKER.format(cut=total, total=total))
    head = keep - keep // 2
    tail = keep // 2
    marker = CUT_MARKER.format(cut=total - keep, total=total)
    return text[:head] + marker + (text[total - tail:] if tail else ""), True
