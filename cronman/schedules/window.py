"""A job's fire times: its schedule bounded by start_at/end_at, plus jitter."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cronman.schedules.base import Schedule
from cronman.schedules.parse import parse_schedule
from cronman.schedules.simple import IntervalSchedule
from cronman.timeutil import ensure_utc, from_ms, to_ms

if TYPE_CHECKING:
    from cronman.models import Job

_MICROSECOND = timedelta(microseconds=1)
_ZERO = timedelta(0)


class FireTimeRanges:
    """Runs of fire times, from ``next_fire_after`` alone."""

    __slots__ = ()

    def next_fire_after(self, t: datetime) -> datetime | None:
        raise NotImplementedError

    def fire_times(self, after: datetime, count: int) -> list[datetime]:
        """Up to ``count`` nominal fire times strictly after ``after``."""
        out: list[datetime] = []
        t = after
        while len(out) < count:
            nxt = self.next_fire_after(t)
            if nxt is None:
                break
            out.append(nxt)
            t = nxt
        return out

    def fire_times_between(self, since: datetime, until: datetime, limit: int) -> list[datetime]:
        """Nominal fire times t with ``since <= t <= until`` (both inclusive), oldest first.

        At most ``limit`` are returned; ask for ``limit + 1`` to learn whether
        the range holds more than ``limit``.
        """
        out: list[datetime] = []
        t = self.next_fire_after(since - _MICROSECOND)
        while t is not None and t <= until and len(out) < limit:
            out.append(t)
            t = self.next_fire_after(t)
        return out


class JobTimes(FireTimeRanges):
    """The fire times of one job.

    Nominal fire times are the schedule's, kept when inside
    ``[start_at, end_at]`` (both inclusive). The time a fire is *due* is the
    nominal time plus a jitter offset in ``[0, jitter)`` derived from
    blake2b(job id, fire time in ms): every replica computes the same one.
    Run ids and ``scheduled_for`` use the nominal time.
    """

    __slots__ = ("schedule", "job_id", "start_at", "end_at", "jitter", "_before_start",
                 "_jitter_ms")

    def __init__(self, schedule: Schedule, *, job_id: str, start_at: datetime | None,
                 end_at: datetime | None, jitter: float | None) -> None:
        self.schedule = schedule
        self.job_id = job_id
        self.start_at = None if start_at is None else ensure_utc(start_at)
        self.end_at = None if end_at is None else ensure_utc(end_at)
        self.jitter = jitter
        self._before_start = None if self.start_at is None else self.start_at - _MICROSECOND
        self._jitter_ms = round(jitter * 1000) if jitter and jitter > 0 else 0

    def next_fire_after(self, t: datetime) -> datetime | None:
        """The first nominal fire time strictly after ``t`` inside the window."""
        if self._before_start is not None and t < self._before_start:
            t = self._before_start
        fire = self.schedule.next_after(t)
        if fire is None or (self.end_at is not None and fire > self.end_at):
            return None
        return fire

    def next_fire_ms_after(self, ms: int) -> int | None:
        """``next_fire_after`` in epoch milliseconds (plain arithmetic for
        unbounded interval schedules: the scheduler's hot path)."""
        s = self.schedule
        if isinstance(s, IntervalSchedule) and self.start_at is None and self.end_at is None:
            return s.next_ms_after(ms)
        nxt = self.next_fire_after(from_ms(ms))
        return None if nxt is None else to_ms(nxt)

    def due_ms(self, fire_ms: int) -> int:
        """``due_at`` in epoch milliseconds."""
        if not self._jitter_ms:
            return fire_ms
        return to_ms(self.due_at(from_ms(fire_ms)))

    def jitter_offset(self, fire_time: datetime) -> timedelta:
        """The deterministic delay of this fire, in whole ms within ``[0, jitter)``."""
        if not self._jitter_ms:
            return _ZERO
        digest = hashlib.blake2b(f"{self.job_id}|{to_ms(fire_time)}".encode(), digest_size=8,
                                 person=b"cronman-jitter").digest()
        return timedelta(milliseconds=int.from_bytes(digest, "big") % self._jitter_ms)

    def due_at(self, fire_time: datetime) -> datetime:
        """When the fire at nominal ``fire_time`` is dispatched."""
        return fire_time + self.jitter_offset(fire_time)


class IntervalTimes(IntervalSchedule, FireTimeRanges):
    """The JobTimes of an interval schedule with no window and no jitter, in
    one small object: the schedule is its own JobTimes. (The common job of a
    scheduler's table: a node holding a million saves a wrapper per job.)"""

    __slots__ = ()
    job_id = ""
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter: float | None = None

    @property
    def schedule(self) -> IntervalTimes:
        return self

    def next_fire_after(self, t: datetime) -> datetime | None:
        return self.next_after(t)

    def next_fire_ms_after(self, ms: int) -> int | None:
        return self.next_ms_after(ms)

    def due_ms(self, fire_ms: int) -> int:
        return fire_ms

    def jitter_offset(self, fire_time: datetime) -> timedelta:
        return _ZERO

    def due_at(self, fire_time: datetime) -> datetime:
        return fire_time


#: What a scheduler holds per job for its fire times.
Times = JobTimes | IntervalTimes


_CACHE: dict[tuple[str, int], tuple[Job, JobTimes]] = {}
_CACHE_MAX = 100_000


def job_times(job: Job) -> JobTimes:
    """The JobTimes of a stored job, cached per (job id, version).

    A cached entry is reused only while the job's schedule, window and jitter
    are unchanged, so a stale version number cannot serve old times.
    """
    key = (job.id, job.version)
    hit = _CACHE.get(key)
    if hit is not None:
        old, times = hit
        if (old is job or (old.schedule == job.schedule and old.start_at == job.start_at
                           and old.end_at == job.end_at and old.jitter == job.jitter)):
            return times
    schedule = parse_schedule(job.schedule, job_id=job.id, created_at=job.created_at)
    times = JobTimes(schedule, job_id=job.id, start_at=job.start_at, end_at=job.end_at,
                     jitter=job.jitter)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (job, times)
    return times
