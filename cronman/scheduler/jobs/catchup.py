"""Counting fire times a job missed (for the misfire policy): pure, bounded."""

from __future__ import annotations

from datetime import datetime

from cronman.schedules import IntervalSchedule
from cronman.schedules.window import Times
from cronman.timeutil import from_ms, to_ms

# Fire times within grace examined per job and catch-up (fire_all bound).
MAX_CATCH_UP = 1000
# Missed fire times counted one by one per job and catch-up (interval
# schedules are counted arithmetically, without a bound).
COUNT_CAP = 10_000


def recent_fire_times(times: Times, lo: int, hi: int) -> tuple[list[int], int]:
    """The newest ``MAX_CATCH_UP`` fire times in [lo, hi] (oldest first) and how
    many earlier ones there were beyond that bound."""
    found = [to_ms(t) for t in times.fire_times_between(from_ms(lo), from_ms(hi),
                                                         MAX_CATCH_UP + 1)]
    if len(found) <= MAX_CATCH_UP:
        return found, 0
    if isinstance(times.schedule, IntervalSchedule):
        total, last = count_fire_times(times, lo, hi)
        every = times.schedule.every_ms
        assert last is not None
        return [last - every * i for i in range(MAX_CATCH_UP - 1, -1, -1)], total - MAX_CATCH_UP
    window = found[-MAX_CATCH_UP:]
    t = from_ms(found[-1])
    steps = 0
    while steps < COUNT_CAP:
        nxt = times.next_fire_after(t)
        if nxt is None or to_ms(nxt) > hi:
            break
        window.append(to_ms(nxt))
        t = nxt
        steps += 1
    return window[-MAX_CATCH_UP:], len(window) - MAX_CATCH_UP + len(found) - MAX_CATCH_UP


def count_fire_times(times: Times, lo: int | None, hi: int) -> tuple[int, int | None]:
    """How many fire times fall in [lo, hi] (lo None: from the beginning), and
    the latest of them. Interval schedules are counted arithmetically;
    others one by one up to ``COUNT_CAP``."""
    sched = times.schedule
    if isinstance(sched, IntervalSchedule):
        if times.start_at is not None:
            s = to_ms(times.start_at)
            lo = s if lo is None else max(lo, s)
        if times.end_at is not None:
            hi = min(hi, to_ms(times.end_at))
        if lo is None or hi < lo:
            return 0, None
        k_lo = -((sched.anchor_ms - lo) // sched.every_ms)  # ceil((lo - anchor) / every)
        k_hi = (hi - sched.anchor_ms) // sched.every_ms
        if k_hi < k_lo:
            return 0, None
        return k_hi - k_lo + 1, sched.anchor_ms + k_hi * sched.every_ms
    start: datetime = from_ms(0 if lo is None else lo)
    found = times.fire_times_between(start, from_ms(hi), COUNT_CAP)
    if not found:
        return 0, None
    return len(found), to_ms(found[-1])
