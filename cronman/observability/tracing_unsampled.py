"""The ``RunTrace`` of a run the sampler dropped (``tracing_sampling``):
no span, no attribute, no context object, nothing kept after it ends.

Its receivers still get the run's trace context, marked unsampled (W3C
``traceparent`` ``00-<trace id>-<span id>-00``, with a new span id per
attempt as the SDK's non-recording attempt span had), so their own spans
join the run's trace or are dropped alike; its log records carry the same
ids as before (the run's trace, the attempt's span).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

Carrier = tuple[tuple[str, str], ...]  # as tracing.Carrier


def random_span_hex() -> str:
    """A new span id in hex (random, never the invalid 0)."""
    return format(random.getrandbits(64) or 1, "016x")


class UnsampledRun:
    """A dropped run's ``tracing.RunTrace``: its ids, and nothing else."""

    __slots__ = ("_trace", "_span", "_run_id", "_run_span_of", "_run_span")

    def __init__(self, trace_hex: str, run_id: str, run_span_of: Callable[[str], str]) -> None:
        self._trace = trace_hex
        self._span = ""  # the attempt under way's span id
        self._run_id = run_id
        self._run_span_of = run_span_of  # the run span's id in hex, asked only when logged
        self._run_span = ""

    def attempt_started(self, attempt: int, kind: str, lateness_ms: int | None) -> Carrier:
        span = self._span = random_span_hex()
        return (("traceparent", f"00-{self._trace}-{span}-00"),)

    def attempt_ended(self, status: str, error: str | None) -> None:
        self._span = ""

    def log_ids(self) -> tuple[str, str]:
        if self._span:
            return self._trace, self._span
        if not self._run_span:  # between attempts: the run span's
            self._run_span = self._run_span_of(self._run_id)
        return self._trace, self._run_span

    def ended(self, status: str) -> None:
        pass

    def let_go(self, reason: str) -> None:
        pass

    def link_upstream(self, run_ids: Sequence[str]) -> None:
        pass
