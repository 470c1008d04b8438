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

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronman.models import Job
from cronman.scheduler import policies
from cronman.scheduler.claims import Cursor, Fire
from cronman.scheduler.ownership import Ownership, job_hash
from cronman.scheduler.timers import Entry, TimerHeap
from cronman.schedules import IntervalSchedule, JobTimes, parse_schedule
from cronman.schedules.cronexpr import _uses_job_id
from cronman.schedules.window import IntervalTimes, Times
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


_NO_LABELS: dict[str, str] = {}
_EPOCH = from_ms(0)
# Interned values (schedules, targets, policy groups, parsed times) are shared
# by every job with the same one; the tables are emptied when they grow past
# this, which only ends sharing for jobs loaded afterwards.
INTERN_MAX = 200_000
_TIMES: dict[tuple[Any, ...], JobTimes] = {}
_TARGETS: dict[str, dict[str, Any]] = {}
TARGET_CACHE_MAX = 4096


class Common:
    """The parts of a job definition many jobs share (interned per table)."""

    __slots__ = ("namespace", "retry", "misfire", "delivery", "concurrency",
                 "start_at", "end_at", "jitter", "dead_letter", "policy", "grace_ms")

    def __init__(self, namespace: str, retry: dict[str, Any], misfire: dict[str, Any],
                 delivery: str, concurrency: str, start_at: datetime | None,
                 end_at: datetime | None, jitter: float | None,
                 dead_letter: dict[str, Any] | None) -> None:
        self.namespace = namespace
        self.retry = retry
        self.misfire = misfire
        self.delivery = delivery
        self.concurrency = concurrency
        self.start_at = start_at
        self.end_at = end_at
        self.jitter = jitter
        self.dead_letter = dead_letter
        self.policy, self.grace_ms = policies.misfire_settings(misfire)


class JobState:
    """One owned job: what timing and dispatch need, and nothing more.

    The definition is kept compact -- the fields shared with other jobs sit
    in an interned :class:`Common`, the target as its JSON text (interned
    too), the schedule only parsed (jobs with the same times share one
    JobTimes) -- and ``job`` rebuilds a :class:`Job` when a fire needs one.
    That view carries the normalised schedule object, no labels, and the
    epoch as ``created_at`` and ``updated_at``: the scheduler uses none of
    them (the creation time matters only when the job is first loaded).
    """

    __slots__ = ("id", "name", "version", "priority", "paused", "common",
                 "target", "times", "hash", "cursor_ms", "skipped_pending")

    def __init__(self, job_id: str, name: str, version: int, priority: int, paused: bool,
                 common: Common, target: str, times: Times, h: int,
                 skipped_pending: int) -> None:
        self.id = job_id
        self.name = name
        self.version = version
        self.priority = priority
        self.paused = paused
        self.common = common
        self.target = target
        self.times = times
        self.hash = h
        self.cursor_ms: int | None = None  # the latest fire time handled (claimed or skipped)
        self.skipped_pending = skipped_pending

    def __lt__(self, other: JobState) -> bool:
        # Heap entries of one job tie up to their state (a stale and a fresh
        # entry for the same fire): any consistent order will do.
        return id(self) < id(other)

    @property
    def policy(self) -> str:
        return self.common.policy

    @property
    def grace_ms(self) -> int:
        return self.common.grace_ms

    @property
    def job(self) -> Job:
        """The job as a :class:`Job` (a new object each time; cheap)."""
        c = self.common
        return Job(id=self.id, namespace=c.namespace, name=self.name, version=self.version,
                   schedule=self.times.schedule.to_dict(), target=decode_target(self.target), retry=c.retry,
                   misfire=c.misfire, delivery=c.delivery, concurrency=c.concurrency,
                   priority=self.priority, start_at=c.start_at, end_at=c.end_at,
                   jitter=c.jitter, paused=self.paused, labels=_NO_LABELS,
                   dead_letter=c.dead_letter, created_at=_EPOCH, updated_at=_EPOCH,
                   last_fire_at=None if self.cursor_ms is None else from_ms(self.cursor_ms),
                   skipped_pending=self.skipped_pending)


def decode_target(text: str) -> dict[str, Any]:
    """A target object from its JSON text. Recently decoded targets are
    reused, so jobs with the same target share one object (and the target's
    prepared request)."""
    target = _TARGETS.get(text)
    if target is None:
        if len(_TARGETS) >= TARGET_CACHE_MAX:
            _TARGETS.clear()
        target = _TARGETS[text] = json.loads(text)
    return target


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def times_of(job_id: str, created_at: datetime, text: str, start_at: datetime | None,
             end_at: datetime | None, jitter: float | None) -> Times:
    """The JobTimes of a job, from its schedule's JSON ``text`` (decoded only
    when needed). Cron schedules are shared between jobs with the same text
    and window (and, where ``H`` appears, the same resolved seconds and
    minutes) when there is no jitter; other schedules are small and parsed
    per job."""
    if not jitter:
        times = _TIMES.get((text, start_at, end_at))
        if times is not None:
            return times
    spec = json.loads(text)
    if jitter or spec.get("kind") != "cron":
        schedule = parse_schedule(spec, job_id=job_id, created_at=created_at)
        if (isinstance(schedule, IntervalSchedule) and not jitter and start_at is None
                and end_at is None):
            return IntervalTimes(schedule.every_ms, schedule.anchor_ms)
        return JobTimes(schedule, job_id=job_id, start_at=start_at, end_at=end_at,
                        jitter=jitter)
    cron = spec.get("cron")
    key: tuple[Any, ...] = (text, start_at, end_at)
    schedule = None
    if isinstance(cron, str) and _uses_job_id(cron):
        schedule = parse_schedule(spec, job_id=job_id, created_at=created_at)
        expr = schedule.expr  # type: ignore[attr-defined]
        key += (expr.seconds, expr.minutes)
    times = _TIMES.get(key)
    if times is None:
        if schedule is None:
            schedule = parse_schedule(spec, job_id="", created_at=created_at)
        if len(_TIMES) >= INTERN_MAX:
            _TIMES.clear()
        times = _TIMES[key] = JobTimes(schedule, job_id="", start_at=start_at,
                                       end_at=end_at, jitter=None)
    return times


class Prepared:
    """A job's state built ahead of a gain, with what admitting it needs."""

    __slots__ = ("state", "created_at")

    def __init__(self, state: JobState, created_at: datetime) -> None:
        self.state = state
        self.created_at = created_at


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
        self._fires: list[Fire] = []  # catch-up fires found when loading jobs
        self._cursors: list[Cursor] = []
        self.misfires_skipped = 0  # fire times passed over (read and reset by the node)
        self.bad_jobs = 0
        self._interned: dict[Any, Any] = {}  # texts and Common records shared by jobs

    # -- queries ----------------------------------------------------------

    def lookup(self, job_id: str) -> tuple[Job | None, bool]:
        """(the job as held here or None, whether it was deleted)."""
        st = self.jobs.get(job_id)
        return (None if st is None else st.job), job_id in self.deleted

    def version_of(self, job_id: str) -> tuple[int, bool] | None:
        """(version, paused) of a held job without building its Job, or None."""
        st = self.jobs.get(job_id)
        return None if st is None else (st.version, st.paused)

    def owns(self, job_id: str) -> bool:
        return self.ownership.owns(job_id)

    def next_due(self) -> int | None:
        """The due time (ms) of the earliest pending fire: 0 when catch-up
        fires wait, else the heap's head (may be stale), or None."""
        if self._fires or self._cursors:
            return 0
        return self.heap.peek_due()

    def _live(self, e: Entry) -> bool:
        return self.jobs.get(e[2]) is e[4]

    # -- jobs coming in ---------------------------------------------------

    def load_row(self, row: tuple[Any, ...], now_ms: int) -> bool:
        """``load`` for a lean row of ``live_job_rows`` (``LIVE_ROW_COLUMNS``,
        the JSON columns as text): no :class:`Job` is built, and each distinct
        shared text is decoded once."""
        job_id = row[0]
        h = job_hash(job_id)
        return self._hold(job_id, h, row[3], row[14], lambda: self._state_from_row(row, h),
                          row[18], row[16], now_ms)

    def _hold(self, job_id: str, h: int, version: int, paused: bool,
              build: Callable[[], JobState | None], last_fire_at: datetime | None,
              created_at: datetime, now_ms: int) -> bool:
        """``load``'s common part: note an unowned job, admit a new one, replace
        a held one whose version or pause state changed (``build`` makes its
        state, only when needed)."""
        if not self.ownership.owns(h):
            if job_id in self.jobs:
                self._drop(job_id, h)
            else:
                self.others[job_id] = h
            return False
        self.others.pop(job_id, None)
        st = self.jobs.get(job_id)
        if st is None:
            new = build()
            if new is not None:
                self._admit(new, None if last_fire_at is None else to_ms(last_fire_at),
                            created_at, now_ms)
        elif version != st.version or paused != st.paused:
            self._change(st, build(), now_ms)
        return True

    def _state_from_row(self, row: tuple[Any, ...], h: int) -> JobState | None:
        (job_id, namespace, name, version, schedule, target, retry, misfire, delivery,
         concurrency, priority, start_at, end_at, jitter, paused, dead_letter, created_at,
         _change_seq, _last_fire_at, skipped_pending) = row
        if dead_letter == "null":
            dead_letter = None
        try:
            times = times_of(job_id, created_at, schedule, start_at, end_at, jitter)
        except Exception as exc:  # a stored job the schedule code refuses: never crash
            return self._refused(job_id, exc)
        key = ("common", namespace, retry, misfire, delivery, concurrency, start_at, end_at,
               jitter, dead_letter)
        common = self._interned.get(key)
        if common is None:
            common = self._intern_as(key, Common(
                self._intern(namespace), json.loads(retry), json.loads(misfire), delivery,
                concurrency, start_at, end_at, jitter,
                None if dead_letter is None else json.loads(dead_letter)))
        return JobState(job_id, name, version, priority, paused, common,
                        self._intern(target), times, h, skipped_pending)

    def _refused(self, job_id: str, exc: Exception) -> None:
        self.bad_jobs += 1
        log.error("job %s has a schedule that cannot be computed, not scheduled: %s",
                  job_id, exc)
        return None

    def load(self, job: Job, now_ms: int) -> bool:
        """Take in a job read from the database (start, gain, or a change
        announcement). Returns whether this node owns it."""
        if job.deleted_at is not None:
            self._forget(job.id, now_ms)
            return False
        h = job_hash(job.id)
        return self._hold(job.id, h, job.version, job.paused, lambda: self._new_state(job, h),
                          job.last_fire_at, job.created_at, now_ms)

    def _forget(self, job_id: str, now_ms: int) -> None:
        self.jobs.pop(job_id, None)
        self.others.pop(job_id, None)
        self.deleted[job_id] = now_ms
        if len(self.deleted) > 10_000:
            for jid, at in list(self.deleted.items()):
                if now_ms - at > DELETED_MEMORY_MS:
                    del self.deleted[jid]

    def _drop(self, job_id: str, h: int) -> None:
        self.jobs.pop(job_id, None)
        self.others[job_id] = h

    def _intern(self, value: Any) -> Any:
        got = self._interned.get(value)
        if got is None:
            if len(self._interned) >= INTERN_MAX:
                self._interned.clear()
            got = self._interned[value] = value
        return got

    def _new_state(self, job: Job, h: int) -> JobState | None:
        """The state of a job given as a :class:`Job` (changes read by polling,
        tests): built from the lean row it would have been read as."""
        return self._state_from_row((
            job.id, job.namespace, job.name, job.version, _dumps(job.schedule),
            _dumps(job.target), _dumps(job.retry), _dumps(job.misfire), job.delivery,
            job.concurrency, job.priority, job.start_at, job.end_at, job.jitter, job.paused,
            None if job.dead_letter is None else _dumps(job.dead_letter), job.created_at,
            job.change_seq, job.last_fire_at, job.skipped_pending), h)

    def _intern_as(self, key: Any, value: Any) -> Any:
        if len(self._interned) >= INTERN_MAX:
            self._interned.clear()
        self._interned[key] = value
        return value

    def _admit(self, st: JobState, last: int | None, created_at: datetime,
               now_ms: int) -> None:
        """Hold a newly owned job (``last``: its stored cursor in ms): schedule
        its next fire, or hand missed fire times to the misfire policy."""
        self.jobs[st.id] = st
        if st.paused:
            st.cursor_ms = last
            return
        if last is not None:
            since: int | None = last
        elif st.times.schedule.kind == "once":
            since = None  # a once job that never fired: its time counts even if past
        else:
            since = to_ms(created_at)
        # ``skip`` passes over only times clearly in the past; the other
        # policies consider every past time (fire_once picks the latest).
        horizon = now_ms - MISFIRE_TOLERANCE_MS if st.policy == "skip" else now_ms
        st.cursor_ms = since
        first = st.times.next_fire_ms_after(0 if since is None else since)
        if first is None:
            return  # a once job that fired, or a window that ended
        if first > horizon:  # the common case: nothing missed
            self._push(st, first)
            return
        self._catch_up(st, since, horizon, now_ms)
        after = horizon if st.cursor_ms is None else max(st.cursor_ms, horizon)
        self._push_next(st, after)

    def _change(self, st: JobState, new: JobState | None, now_ms: int) -> None:
        """A held job changed: new definition, a fresh heap entry, no catch-up
        (the old state's entries are stale: it is no longer the held one)."""
        if new is None:
            self.jobs.pop(st.id, None)
            return
        was_paused = st.paused
        new.cursor_ms = st.cursor_ms
        new.skipped_pending = st.skipped_pending
        self.jobs[st.id] = new
        if new.paused:
            return
        floor = now_ms if was_paused else now_ms - MISFIRE_TOLERANCE_MS
        after = floor if new.cursor_ms is None else max(new.cursor_ms, floor)
        self._push_next(new, after)

    def _push_next(self, st: JobState, after_ms: int) -> None:
        nxt = st.times.next_fire_ms_after(after_ms)
        if nxt is not None:
            self._push(st, nxt)

    def _push(self, st: JobState, fire_ms: int) -> None:
        self.heap.push(st.times.due_ms(fire_ms), st.priority, st.id, fire_ms, st)

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
            self._cursors.append((st.id, from_ms(st.cursor_ms), st.skipped_pending))

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

    def gained_without(self, member: str) -> list[str]:
        """The ids this node would gain if ``member`` left (nothing changes)."""
        own = Ownership([m for m in self.ownership.nodes if m != member], self.node_id,
                        self.replicas)
        others = list(self.others.items())
        if not others or own == self.ownership:
            return []
        mask = own.owned_mask([h for _, h in others])
        return [job_id for (job_id, _), gained in zip(others, mask, strict=True) if gained]

    def prepare_row(self, row: tuple[Any, ...]) -> Prepared | None:
        """A job's state built from a lean row but not held: a standby for a
        gain expected soon (see ``admit_prepared``)."""
        st = self._state_from_row(row, job_hash(row[0]))
        return None if st is None else Prepared(st, row[16])

    def admit_prepared(self, prepared: Prepared, version: int, paused: bool,
                       last_fire_ms: int | None, skipped_pending: int, now_ms: int) -> bool:
        """Hold a prepared job given its current version, pause state and cursor
        (read just now). False when it is stale (changed since it was
        prepared), already held, or not owned: the caller loads it instead."""
        st = prepared.state
        if (version != st.version or paused != st.paused or st.id in self.jobs
                or not self.ownership.owns(st.hash)):
            return False
        self.others.pop(st.id, None)
        st.skipped_pending = skipped_pending
        self._admit(st, last_fire_ms, prepared.created_at, now_ms)
        return True

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
            due_ms, _, job_id, fire_ms, _ = popped[0]
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
