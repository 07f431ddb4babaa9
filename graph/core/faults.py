"""faults: named crash points, so the kill harness can SIGKILL a run at an exact place.

Off unless `BOUNDLOOP_CRASH_AT` names a point, e.g. `tool:after_intent` or `enter:act#2`
(the second time that point is reached in this process). A crash is a real SIGKILL of this
process: nothing is flushed, nothing is cleaned up — exactly what a power cut or an OOM kill
leaves behind. The points:

    enter:<node>        a phase node starts (the previous step's checkpoint is written)
    leave:<node>        a phase node computed its update, before LangGraph saves it
    tool:before_intent  a side-effecting call is about to be written to the ledger
    tool:after_intent   INTENT is written, the call is not sent yet
    tool:during_call    the call is in flight (BOUNDLOOP_CRASH_DELAY_S after sending, default 0.05)
    tool:after_call     the call returned, COMPLETE/ABORT is not written yet
    question:recorded   a server's question is recorded; the run's stop at it is not saved yet
    model:after_intent  a model call's INTENT is recorded, the request is not sent yet
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from contextlib import asynccontextmanager
from typing import AsyncIterator

_hits: Counter[str] = Counter()


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("BOUNDLOOP_CRASH_AT")
    if not spec:
        return None
    name, _, nth = spec.partition("#")
    return name, int(nth or 1)


def crash_point(name: str) -> None:
    """SIGKILL this process if `name` is the armed point and this is its armed occurrence."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] += 1
    if _hits[name] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)


@asynccontextmanager
async def crash_while(name: str) -> AsyncIterator[None]:
    """Around an awaited call: if `name` is armed, SIGKILL shortly after the call has started."""
    target = _target()
    if target is None or target[0] != name:
        yield
        return
    _hits[name] += 1
    if _hits[name] != target[1]:
        yield
        return
    delay_s = float(os.environ.get("BOUNDLOOP_CRASH_DELAY_S", "0.05"))

    async def kill_later() -> None:
        await asyncio.sleep(delay_s)
        os.kill(os.getpid(), signal.SIGKILL)

    killer = asyncio.create_task(kill_later())
    try:
        yield
    finally:
        killer.cancel()
