"""What a worker's handler is given for one run (``RunContext``) and how it fails one (``RunFailed``).

A handler is ``handler(payload, ctx)``: it returns the run's result (a JSON
object, or None) or raises. ``ctx.progress`` is sent on the next heartbeat, and so is the
output a handler follows (``ctx.follow_output``) when it changed;
``ctx.cancelled`` is set when the run should stop: a cancel was asked, its
lease is gone, its timeout passed, or the worker is stopping
(``ctx.cancel_reason`` says which). ``ctx.traceparent``/``ctx.tracestate``
are the run's trace context when tracing is on (the worker's heartbeats and
report send them, so the API's spans of them join the run's trace).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cronman.client.queues import PROGRESS_MAX_CHARS, trace_headers
from cronman.client.types import Run

# The reasons a run is cancelled, as ``cancel_reason`` gives them.
CANCEL_REQUESTED = "cancel requested"
LEASE_LOST = "lease lost"
TIMED_OUT = "timed out"
WORKER_STOPPED = "worker stopped"


def without_nul(text: str) -> str:
    """``text`` with its NUL characters replaced (U+FFFD): the API refuses NUL in any body."""
    return text.replace("\x00", "\ufffd")


class RunFailed(Exception):  # noqa: N818 (a handler's outcome, not an error of the worker)
    """Raised by a handler: the run failed with ``message``, and ``result`` is recorded
    with it (e.g. the exit code and output of a failed command)."""

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class RunContext:
    """One held run, as its handler sees it."""

    run: Run
    payload: Any
    attempt: int
    queue: str
    worker_id: str
    deadline: float  # time.monotonic() by which the run's timeout ends it
    # The W3C trace context the run was handed over with (None: tracing is
    # off): a handler's own spans belong under it.
    traceparent: str | None = None
    tracestate: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str | None = None
    _progress: tuple[str | None, float | None] | None = None
    _output: Callable[[], tuple[str, str]] | None = None
    _output_sent: tuple[str, str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def run_id(self) -> str:
        return self.run["id"]

    def progress(self, text: str | None, percent: float | None = None) -> None:
        """Progress to send on the next heartbeat (text cut to 1024 characters, NULs
        replaced,
        percent bounded to 0..100, NaN dropped); a later call replaces an unsent one."""
        if text is not None:
            text = without_nul(text[:PROGRESS_MAX_CHARS])
        if percent is not None:
            percent = float(percent)
            percent = None if math.isnan(percent) else min(max(percent, 0.0), 100.0)
        with self._lock:
            self._progress = (text, percent)

    def trace_headers(self) -> dict[str, str]:
        """The run's ``traceparent``/``tracestate`` as headers (empty when tracing is off)."""
        return trace_headers(self.traceparent, self.tracestate)

    def remaining(self) -> float:
        """Seconds until the run's timeout, by this host's clock."""
        return self.deadline - time.monotonic()

    def cancel(self, reason: str) -> None:
        """Ask the handler to stop (the first reason given is kept)."""
        with self._lock:
            if self.cancel_reason is None:
                self.cancel_reason = reason
        self.cancelled.set()

    def take_progress(self) -> tuple[str | None, float | None] | None:
        """The progress not sent yet, if any (cleared: put it back if it was not sent)."""
        with self._lock:
            pending, self._progress = self._progress, None
        return pending

    def follow_output(self, source: Callable[[], tuple[str, str]]) -> None:
        """``source`` gives the tails of the run's stdout and stderr so far (each
        at most 4096 characters): read at each heartbeat, sent when it changed."""
        self._output = source

    def take_output(self) -> dict[str, str] | None:
        """The followed output when it changed since it was last sent, else None."""
        if self._output is None:
            return None
        now = self._output()
        with self._lock:
            if now == (self._output_sent or ("", "")):  # nothing new (nothing yet: no news)
                return None
            self._output_sent = now
        return {"stdout": without_nul(now[0]), "stderr": without_nul(now[1])}

    def restore_output(self) -> None:
        """The output taken was not sent: send it on the next heartbeat."""
        with self._lock:
            self._output_sent = None

    def restore_progress(self, pending: tuple[str | None, float | None]) -> None:
        """Keep ``pending`` for the next heartbeat unless newer progress came meanwhile."""
        with self._lock:
            if self._progress is None:
                self._progress = pending


Handler = Callable[[Any, RunContext], "dict[str, Any] | None"]
