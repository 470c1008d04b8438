"""What a node knows about jobs, and when they fire: pure code, no I/O.

The table holds the jobs this node owns (full records, their schedule, a
cursor and a generation) and only a compact record -- id and 64-bit hash --
of live jobs it does not own, so a membership change is reconciled without a
database scan. Owned, active jobs have exactly one live entry in the timer
heap: their next fire. Popping it computes the following fire time from the
schedule at once (never from when a run ended), so replicas agree.

Misfires (SPEC §3): when a job is loaded (node start, job gained, job
created while the node could not hear about it), fire times between its
stored cursor (``last_fire_at``) and now are handed to the misfire policy; so
are fire times found when the node fell behind by more than the job's grace
(or, for ``fire_once``, fell behind by several fire times). Fire times not
fired are counted and carried into the next run's ``skipped_before``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from datetime import datetime

from cronman.models import Job
from cronman.scheduler import policies
from cronman.scheduler.claims import Cursor, Fire
from cronman.scheduler.ownership import Ownership, job_hash
from cronman.scheduler.timers import Entry, TimerHeap
from cronman.schedules import IntervalSchedule, JobTimes, job_times
from cronman.timeutil import from_ms, to_ms

log = logging.getLogger(__name__)

# A fire found less than this far in the past (sync lag, a busy loop) is
# fired normally: not a misfire for ``skip``, and a single late fire time is
# no catch-up for ``fire_once``.
MISFIRE_TOLERANCE_MS = 1000
# Fire times within grace examined per job and catch-up (fire_all bound).
MAX_CATCH_UP = 1000
# Missed fire times counted one by one per job and catch-up (interval
# schedules are counted arithmetically, without a bound).
COUNT_CAP = 10_000
# How long a deleted job's id is remembered (claimed fires of it end skipped).
DELETED_MEMORY_MS = 600_000


@dataclass(slots=True, eq=False)
class JobState:
    job: Job
    times: JobTimes
    hash: int
    gen: int
    cursor_ms: int | None = None  # the latest fire time handled (claimed or skipped)
    skipped_pending: int = 0
    policy: str = policies.DEFAULT_MISFIRE_POLICY
    grace_ms: int = int(policies.DEFAULT_MISFIRE_GRACE * 1000)


class JobTable:
    """Owned jobs, their next fires, and the compact record of the others."""

    def __init__(self, node_id: str, replicas: int, members: list[str] | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.ownership = Ownership(members or [node_id], node_id, replicas)
        self.jobs: dict[str, JobState] = {}
        self.others: dict[str, int] = {}
        self.deleted: dict[str, int] = {}
        self.heap = TimerHeap()
        self._gen = itertools.count(1)
        self._fires: list[Fire] = []  # catch-up fires found when loading jobs
        self._cursors: list[Cursor] = []
        self.misfires_skipped = 0  # fire times passed over (read and reset by the node)
        self.bad_jobs = 0

    # -- queries ----------------------------------------------------------

    def lookup(self, job_id: str) -> tuple[Job | None, bool]:
        """(the job as held here or None, whether it was deleted)."""
        st = self.jobs.get(job_id)
        return (None if st is None else st.job), job_id in self.deleted

    def owns(self, job_id: str) -> bool:
        return self.ownership.owns(job_id)

    def next_due(self) -> int | None:
        """The due time (ms) of the earliest pending fire: 0 when catch-up
        fires wait, else the heap's head (may be stale), or None."""
        if self._fires or self._cursors:
            return 0
        return self.heap.peek_due()

    def _live(self, e: Entry) -> bool:
        st = self.jobs.get(e[3])
        return st is not None and st.gen == e[5]

    # -- jobs coming in ---------------------------------------------------

    def load(self, job: Job, now_ms: int) -> bool:
        """Take in a job read from the database (start, gain, or a change
        announcement). Returns whether this node owns it."""
        if job.deleted_at is not None:
            self._forget(job.id, now_ms)
            return False
        h = job_hash(job.id)
        if not self.ownership.owns(h):
            if job.id in self.jobs:
                self._drop(job.id, h)
            else:
                self.others[job.id] = h
            return False
        self.others.pop(job.id, None)
        st = self.jobs.get(job.id)
        if st is None:
            self._admit(job, h, now_ms)
        elif job.version != st.job.version or job.paused != st.job.paused:
            self._change(st, job, now_ms)
        return True

    def _forget(self, job_id: str, now_ms: int) -> None:
        st = self.jobs.pop(job_id, None)
        if st is not None:
            st.gen = -1
        self.others.pop(job_id, None)
        self.deleted[job_id] = now_ms
        if len(self.deleted) > 10_000:
            for jid, at in list(self.deleted.items()):
                if now_ms - at > DELETED_MEMORY_MS:
                    del self.deleted[jid]

    def _drop(self, job_id: str, h: int) -> None:
        st = self.jobs.pop(job_id, None)
        if st is not None:
            st.gen = -1
        self.others[job_id] = h

    def _new_state(self, job: Job, h: int) -> JobState | None:
        try:
            times = job_times(job)
        except Exception as exc:  # a stored job the schedule code refuses: never crash
            self.bad_jobs += 1
            log.error("job %s has a schedule that cannot be computed, not scheduled: %s",
                      job.id, exc)
            return None
        policy, grace_ms = policies.misfire_settings(job.misfire)
        return JobState(job=job, times=times, hash=h, gen=next(self._gen),
                        skipped_pending=job.skipped_pending, policy=policy, grace_ms=grace_ms)

    def _admit(self, job: Job, h: int, now_ms: int) -> None:
        st = self._new_state(job, h)
        if st is None:
            return
        self.jobs[job.id] = st
        last = None if job.last_fire_at is None else to_ms(job.last_fire_at)
        if job.paused:
            st.cursor_ms = last
            return
        if last is not None:
            since: int | None = last
        elif st.times.schedule.kind == "once":
            since = None  # a once job that never fired: its time counts even if past
        else:
            since = to_ms(job.created_at)
        # ``skip`` passes over only times clearly in the past; the other
        # policies consider every past time (fire_once picks the latest).
        horizon = now_ms - MISFIRE_TOLERANCE_MS if st.policy == "skip" else now_ms
        st.cursor_ms = since
        first = st.times.next_fire_after(from_ms(0 if since is None else since))
        if first is None:
            return  # a once job that fired, or a window that ended
        if to_ms(first) > horizon:  # the common case: nothing missed
            self._push(st, first)
            return
        self._catch_up(st, since, horizon, now_ms)
        after = horizon if st.cursor_ms is None else max(st.cursor_ms, horizon)
        self._push_next(st, after)

    def _change(self, st: JobState, job: Job, now_ms: int) -> None:
        """A held job changed: new definition, a fresh heap entry, no catch-up."""
        was_paused = st.job.paused
        new = self._new_state(job, st.hash)
        if new is None:
            self.jobs.pop(job.id, None)
            st.gen = -1
            return
        new.cursor_ms = st.cursor_ms
        new.skipped_pending = st.skipped_pending
        self.jobs[job.id] = new
        st.gen = -1
        if job.paused:
            return
        floor = now_ms if was_paused else now_ms - MISFIRE_TOLERANCE_MS
        after = floor if new.cursor_ms is None else max(new.cursor_ms, floor)
        self._push_next(new, after)

    def _push_next(self, st: JobState, after_ms: int) -> None:
        nxt = st.times.next_fire_after(from_ms(after_ms))
        if nxt is not None:
            self._push(st, nxt)

    def _push(self, st: JobState, nxt: datetime) -> None:
        fire_ms = to_ms(nxt)
        due_ms = to_ms(st.times.due_at(nxt)) if st.times.jitter else fire_ms
        self.heap.push(due_ms, st.job.priority, st.job.id, fire_ms, st.gen)

    def _catch_up(self, st: JobState, since: int | None, horizon: int, now_ms: int) -> None:
        """Apply the misfire policy to fire times in (since, horizon]."""
        grace_lo = now_ms - st.grace_ms
        lo = None if since is None else since + 1
        recent_lo = grace_lo if lo is None else max(lo, grace_lo)
        recent: list[int] = []
        older, older_last = 0, None
        if recent_lo <= horizon:
            recent, older = _recent_fire_times(st.times, recent_lo, horizon)
        older_hi = min(grace_lo - 1, horizon)
        if lo is None or lo <= older_hi:
            n, older_last = _count_fire_times(st.times, lo, older_hi)
            older += n
        if not recent and not older:
            return
        plan = policies.plan_misfire(recent, older, now_ms, st.policy, st.grace_ms,
                                     older_cursor_ms=older_last)
        self.misfires_skipped += plan.skipped
        st.cursor_ms = plan.cursor_ms if plan.cursor_ms is not None else horizon
        if plan.fire:
            for i, fire_ms in enumerate(plan.fire):
                skipped = st.skipped_pending + plan.skipped if i == 0 else 0
                self._fires.append(self._fire(st, fire_ms, skipped))
            st.skipped_pending = 0
        else:
            st.skipped_pending += plan.skipped
            self._cursors.append((st.job.id, from_ms(st.cursor_ms), st.skipped_pending))

    def _fire(self, st: JobState, fire_ms: int, skipped: int) -> Fire:
        t = from_ms(fire_ms)
        due_ms = to_ms(st.times.due_at(t)) if st.times.jitter else fire_ms
        return Fire(job=st.job, fire_ms=fire_ms, due_ms=due_ms, skipped_before=skipped,
                    scheduled_for=t)

    # -- membership -------------------------------------------------------

    def set_members(self, members: list[str]) -> list[str]:
        """Recompute ownership for a new member list. Jobs lost are dropped at
        once; returns the ids of jobs gained, which the caller loads from the
        database and passes to ``load``."""
        own = Ownership(members, self.node_id, self.replicas)
        if own == self.ownership:
            return []
        self.ownership = own
        held = list(self.jobs.items())
        if held:
            mask = own.owned_mask([st.hash for _, st in held])
            for (job_id, st), keep in zip(held, mask, strict=True):
                if not keep:
                    self._drop(job_id, st.hash)
        others = list(self.others.items())
        if not others:
            return []
        mask = own.owned_mask([h for _, h in others])
        return [job_id for (job_id, _), gained in zip(others, mask, strict=True) if gained]

    # -- the heap ---------------------------------------------------------

    def pop_due(self, now_ms: int, until_ms: int, limit: int | None = None
                ) -> tuple[list[Fire], list[Cursor]]:
        """Fires due by ``until_ms`` (plus catch-up fires found by ``load``) and
        cursors of jobs whose past fire times were skipped without a run."""
        fires, self._fires = self._fires, []
        cursors, self._cursors = self._cursors, []
        heap = self.heap
        while limit is None or len(fires) < limit:
            popped = heap.pop_due(until_ms, self._live, 1)
            if not popped:
                break
            due_ms, _, _, job_id, fire_ms, _ = popped[0]
            st = self.jobs[job_id]
            late = now_ms - due_ms
            if late > MISFIRE_TOLERANCE_MS and (late > st.grace_ms or (
                    st.policy == "fire_once" and self._next_is_past(st, fire_ms, now_ms))):
                st.cursor_ms = fire_ms - 1
                self._catch_up(st, fire_ms - 1, now_ms, now_ms)
                self._push_next(st, max(st.cursor_ms, now_ms))
                fires.extend(self._fires)
                cursors.extend(self._cursors)
                self._fires, self._cursors = [], []
                continue
            fires.append(Fire(job=st.job, fire_ms=fire_ms, due_ms=due_ms,
                              skipped_before=st.skipped_pending))
            st.skipped_pending = 0
            st.cursor_ms = fire_ms
            self._push_next(st, fire_ms)
        if len(self.heap) > 2 * len(self.jobs) + 1024:
            self.heap.compact(self._live)
        return fires, cursors

    @staticmethod
    def _next_is_past(st: JobState, fire_ms: int, now_ms: int) -> bool:
        nxt = st.times.next_fire_after(from_ms(fire_ms))
        return nxt is not None and to_ms(nxt) <= now_ms


def _recent_fire_times(times: JobTimes, lo: int, hi: int) -> tuple[list[int], int]:
    """The newest ``MAX_CATCH_UP`` fire times in [lo, hi] (oldest first) and how
    many earlier ones there were beyond that bound."""
    found = [to_ms(t) for t in times.fire_times_between(from_ms(lo), from_ms(hi),
                                                         MAX_CATCH_UP + 1)]
    if len(found) <= MAX_CATCH_UP:
        return found, 0
    if isinstance(times.schedule, IntervalSchedule):
        total, last = _count_fire_times(times, lo, hi)
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


def _count_fire_times(times: JobTimes, lo: int | None, hi: int) -> tuple[int, int | None]:
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
