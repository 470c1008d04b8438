"""The bounded tail of a command's output, as a run's ``logs_tail`` keeps it.

One bound for every place that runs commands for runs: the container
target's worker agents (``worker_agent``) and the shipped ``cronman worker``
(``client.command``). Standard library only (pure core).
"""

from __future__ import annotations

#: Bytes of stdout and of stderr kept for a run's ``logs_tail``.
LOG_TAIL_BYTES = 4096


class LogTail:
    """The last ``limit`` bytes written to a stream (a ring buffer)."""

    __slots__ = ("limit", "_buf", "total")

    def __init__(self, limit: int = LOG_TAIL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self.limit:
            self._buf[:] = data[-self.limit:]
            return
        self._buf += data
        extra = len(self._buf) - self.limit
        if extra > 0:
            del self._buf[:extra]

    def text(self) -> str:
        """The tail as text (a multi-byte character cut at the start is dropped)."""
        return bytes(self._buf).decode("utf-8", errors="replace").lstrip("\ufffd")
