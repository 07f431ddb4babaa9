"""output: bounded capture of a child's stdout or stderr.

Owns keeping the head and the tail of a stream within a character budget while draining all of
it, so a chatty child never blocks on a full pipe and never fills the server's memory. Never
decides when to stop reading: the runner does.
"""

from __future__ import annotations

from anyio.abc import ByteReceiveStream

_UTF8_MAX_BYTES = 4


class Capture:
    def __init__(self, limit_chars: int) -> None:
        self._limit_chars = limit_chars
        self._keep_bytes = limit_chars * _UTF8_MAX_BYTES
        self._head = bytearray()
        self._tail = bytearray()
        self._total_bytes = 0

    async def drain(self, stream: ByteReceiveStream) -> None:
        """Read `stream` to its end, keeping its first and last bytes."""
        async for chunk in stream:
            self._total_bytes += len(chunk)
            room = self._keep_bytes - len(self._head)  # never negative: the head stops at the keep
            self._head += chunk[:room]
            self._tail += chunk[room:]
            del self._tail[: -self._keep_bytes]

    def text(self) -> tuple[str, bool]:
        """The captured text and whether it was cut; a cut keeps the first and last halves of the budget."""
        if self._total_bytes == len(self._head) + len(self._tail):
            whole = (self._head + self._tail).decode(errors="replace")
            if len(whole) <= self._limit_chars:
                return whole, False
            head = tail = whole
        else:
            head, tail = self._head.decode(errors="replace"), self._tail.decode(errors="replace")
        half = self._limit_chars // 2
        marker = f"\n[... output truncated: {self._total_bytes} bytes in all, middle cut ...]\n"
        return head[:half] + marker + tail[len(tail) - half :], True
