"""``late``: which fire times to check, and when. No I/O.

A job with a ``late`` rule (its own, or its namespace's) is *watched*: for
each of its fire times T (``cronman.schedules``, the same times its
scheduler computes), the deadline is T's due time (T plus the job's jitter)
plus the rule's ``late_after``. Once the deadline has passed, the notifier
looks at the run of (job, T): it is late when there is none, or when it had
not started by the deadline. A run recorded ``skipped`` (by the concurrency
policy, say) was not late: it was decided; nor is a manual run at T (a
replay of it, a backfill, a trigger: ``vocabulary.MANUAL_ORIGINS``), which
starts when a person asks for it, however long after T that is.

The watch holds one entry per (job, rule) in a heap by deadline, so a pass
costs the fires that came due, not the jobs watched. Only fire times at or
after the job's last change (``updated_at``: created, resumed, edited) are
checked, and only those whose deadline is after the notifier's cursor (the
deadline it checked through, kept in the database): a notifier taking over
carries on where the last one stopped. Paused and deleted jobs are not
watched.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronman.models import Job
from cronman.outbox.records import Rule
from cronman.schedules import JobTimes, job_times
from cronman.vocabulary import NotifyEvent

log = logging.getLogger(__name__)

_TINY = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Check:
    """One fire time whose deadline has passed."""

    job: Job
    rule: Rule
    fire_time: datetime
    deadline: datetime


@dataclass(slots=True)
class _Watcher:
    job: Job
    rule: Rule
    times: JobTimes
    late_after: timedelta
    generation: int


class LateWatch:
    """The watched (job, rule) pairs and their next deadlines."""

    def __init__(self, *, max_checks_per_watcher: int = 100) -> None:
        self._heap: list[tuple[datetime, int, tuple[str, str], int, datetime]] = []
        self._watchers: dict[tuple[str, str], _Watcher] = {}
        self._by_job: dict[str, list[tuple[str, str]]] = {}
        self._seq = itertools.count()
        self._generation = itertools.count(1)
        self.max_checks_per_watcher = max_checks_per_watcher
        self.skipped = 0  # fire times passed over (catch-up beyond the cap)

    def __len__(self) -> int:
        return len(self._watchers)

    def watched_jobs(self) -> list[Job]:
        return [self._watchers[keys[0]].job for keys in self._by_job.values() if keys]

    def set_job(self, job: Job, rules: Iterable[Rule], checked_through: datetime) -> None:
        """Watch ``job`` under its ``late`` rules (none, paused or deleted: stop
        watching it); deadlines up to ``checked_through`` are not checked."""
        self.drop_job(job.id)
        late_rules = [r for r in rules if r.wants(NotifyEvent.LATE) and r.late_after]
        if not late_rules or job.paused or job.deleted_at is not None:
            return
        try:
            times = job_times(job)
        except Exception:  # a stored schedule this code cannot read: nothing to expect
            log.warning("late notifications: cannot read the schedule of job %s", job.id)
            return
        keys = []
        for rule in late_rules:
            key = (job.id, rule.key)
            watcher = _Watcher(job, rule, times, timedelta(seconds=rule.late_after or 0),
                               next(self._generation))
            self._watchers[key] = watcher
            keys.append(key)
            start = max(job.updated_at - _TINY, checked_through - watcher.late_after
                        - timedelta(seconds=job.jitter or 0) - _TINY)
            fire = times.next_fire_after(start)
            while fire is not None and self._deadline(watcher, fire) <= checked_through:
                fire = times.next_fire_after(fire)
            self._push(key, watcher, fire)
        self._by_job[job.id] = keys

    def drop_job(self, job_id: str) -> None:
        for key in self._by_job.pop(job_id, ()):
            self._watchers.pop(key, None)  # its heap entries go stale

    def clear(self) -> None:
        self._heap.clear()
        self._watchers.clear()
        self._by_job.clear()

    def due(self, until: datetime) -> list[Check]:
        """Every fire time whose deadline is at or before ``until``, oldest
        deadline first; the watch moves on past them."""
        out: list[Check] = []
        counts: dict[tuple[str, str], int] = {}
        while self._heap and self._heap[0][0] <= until:
            deadline, _, key, generation, fire = heapq.heappop(self._heap)
            watcher = self._watchers.get(key)
            if watcher is None or watcher.generation != generation:
                continue
            n = counts[key] = counts.get(key, 0) + 1
            if n <= self.max_checks_per_watcher:
                out.append(Check(watcher.job, watcher.rule, fire, deadline))
                self._push(key, watcher, watcher.times.next_fire_after(fire))
                continue
            # Catching up after a long absence: pass over the rest at once.
            nxt = watcher.times.next_fire_after(fire)
            while nxt is not None and self._deadline(watcher, nxt) <= until:
                self.skipped += 1
                nxt = watcher.times.next_fire_after(nxt)
            self.skipped += 1
            self._push(key, watcher, nxt)
        return out

    @staticmethod
    def _deadline(watcher: _Watcher, fire: datetime) -> datetime:
        return watcher.times.due_at(fire) + watcher.late_after

    def _push(self, key: tuple[str, str], watcher: _Watcher, fire: datetime | None) -> None:
        if fire is None:
            return
        heapq.heappush(self._heap, (self._deadline(watcher, fire), next(self._seq), key,
                                    watcher.generation, fire))
