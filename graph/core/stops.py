"""stops: where a drive the Runner cancels may stop — inside a node, or before the next one starts.

LangGraph streams a node's update as soon as the node returns, before its step's checkpoint is
written (it streams eagerly whenever `custom` is consumed). A cancel that cut the stream in that
gap would lose a step that finished and was reported, and the halt would be written over the step
before it. So a drive with a node in flight is stopped at once (the node's model or tool call is
cancelled), and a drive between nodes is stopped when its next node starts: that node is held at
its start, after the finished step was saved, and never runs. A stop while act is in flight, its
gate included, loses the actor's reply with the decisions: the resumed act asks the model again.

Only drives the Runner watches are held; the LangGraph server cancels its runs itself. Never
cancels anything: the Runner does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager


class Drive:
    """One watched drive: its nodes in flight, and whether it is stopping."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.stopping = False
        self.held = asyncio.Event()
        """Set when the drive is stopping and its next node was held at its start."""

    def stop(self) -> bool:
        """Hold every node that starts from now on; True when a node is in flight (stop at once)."""
        self.stopping = True
        return self.in_flight > 0


class Stops:
    """The watched drives of one process, by run id."""

    def __init__(self) -> None:
        self._drives: dict[str, Drive] = {}

    @contextmanager
    def watch(self, run_id: str) -> Iterator[Drive]:
        """Watch the drive of `run_id` while it streams."""
        drive = self._drives[run_id] = Drive()
        try:
            yield drive
        finally:
            if self._drives.get(run_id) is drive:
                del self._drives[run_id]

    @asynccontextmanager
    async def node(self, run_id: str) -> AsyncIterator[None]:
        """Around every node: count it in flight, or, when its drive is stopping, never let it start
        (it waits for the Runner to cancel the drive)."""
        drive = self._drives.get(run_id)
        if drive is None:
            yield
            return
        if drive.stopping:
            drive.held.set()
            await asyncio.Future()
        drive.in_flight += 1
        try:
            yield
        finally:
            drive.in_flight -= 1
