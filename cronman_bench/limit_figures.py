"""How well a herd held to a limit was held, from what its receiver saw.

Pure functions over times in seconds (any one clock: the receiver's), shared
by the ``limit-accuracy`` scenario and the cluster test of limits:

- ``max_in_any_second``: the most requests that arrived within one second
  (a sliding window: any second, not calendar seconds);
- ``max_in_flight``: the most requests between their arrival and their
  answer at once;
- ``rate_used``: the share of the limit's rate that arrived over the whole
  seconds during which fires waited on the limit (what the nodes' waiting
  gauge said, sampled), leaving out the seconds of a fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Two samples of the waiting gauge further apart than this say nothing about
# the time between them (a scrape that hung, a node that was not answering).
MAX_SAMPLE_GAP_S = 1.0


def max_in_any_second(arrivals: Iterable[float]) -> int:
    """The most arrivals within any one second (``t - 1 < a <= t``)."""
    times = sorted(arrivals)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 1.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def max_in_flight(intervals: Iterable[tuple[float, float]]) -> int:
    """The most ``(arrived, answered)`` intervals open at once (an answer at the
    instant of another's arrival has closed first)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals],
                    key=lambda e: (e[0], e[1]))
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def waiting_spans(samples: Iterable[tuple[float, float]],
                  max_gap: float = MAX_SAMPLE_GAP_S) -> list[tuple[float, float]]:
    """The spans during which fires waited: between consecutive samples
    ``(time, fires waiting)`` that both saw some, at most ``max_gap`` apart;
    merged, in order."""
    points = sorted(samples)
    spans: list[tuple[float, float]] = []
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if v0 > 0 and v1 > 0 and t1 - t0 <= max_gap:
            if spans and spans[-1][1] >= t0:
                spans[-1] = (spans[-1][0], t1)
            else:
                spans.append((t0, t1))
    return spans


@dataclass(frozen=True, slots=True)
class RateUse:
    """The arrivals over the seconds counted, against the rate."""

    seconds: int  # whole seconds during which fires waited, faults' seconds left out
    arrivals: int  # requests that arrived in them
    rate: float

    @property
    def share(self) -> float | None:
        """Arrivals over what the rate allowed in those seconds (None: none counted)."""
        return self.arrivals / (self.rate * self.seconds) if self.seconds else None

    def to_dict(self) -> dict[str, float | int | None]:
        share = self.share
        return {"seconds": self.seconds, "arrivals": self.arrivals, "rate": self.rate,
                "share": None if share is None else round(share, 4)}


def rate_used(arrivals: Sequence[float], rate: float,
              waiting: Iterable[tuple[float, float]],
              excluded: Iterable[tuple[float, float]] = ()) -> RateUse:
    """The share of ``rate`` used while fires waited.

    The seconds are whole seconds from the first arrival on, each counted
    when the spans of ``waiting`` cover it from end to end and it meets no
    span of ``excluded`` (a fault and what follows it: a dead node's slots
    held until its heartbeat expires, a Redis that restarted granting
    nothing for a while).
    """
    times = sorted(arrivals)
    if not times:
        return RateUse(0, 0, rate)
    spans = list(waiting)
    gaps = list(excluded)
    seconds = arrived = 0
    start, lo = times[0], 0
    while start + 1.0 <= times[-1]:
        end = start + 1.0
        covered = any(a <= start and end <= b for a, b in spans)
        faulty = any(a < end and start < b for a, b in gaps)
        while lo < len(times) and times[lo] < start:
            lo += 1
        hi = lo
        while hi < len(times) and times[hi] < end:
            hi += 1
        if covered and not faulty:
            seconds += 1
            arrived += hi - lo
        start = end
    return RateUse(seconds, arrived, rate)
