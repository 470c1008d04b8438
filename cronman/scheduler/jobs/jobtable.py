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
are fire times found when the node fell behind by more than the job's grace.
A fire time late by no more than the grace fires as usual under every
policy (a busy node delivers its backlog late, never thins it); the policy
decides only beyond it. Fire times not fired are counted and carried into
the next run's ``skipped_before``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronman.coordination.ownership import Ownership, job_hash
from cronman.models import Job, JobRow
from cronman.scheduler import policies
from cronman.scheduler.fires import Cursor, Fire
from cronman.scheduler.jobs.catchup import count_fire_times, recent_fire_times
from cronman.scheduler.jobs.jobstate import Common, JobState, Prepared
from cronman.scheduler.jobs.membership import view_key
from cronman.scheduler.runtime.timers import Entry, TimerHeap
from cronman.schedules import CronSchedule, IntervalSchedule, JobTimes, parse_schedule
from cronman.schedules.cronexpr import uses_job_id
from cronman.schedules.window import IntervalTimes, Times
from cronman.timeutil import from_ms, to_ms
from cronman.vocabulary import DEFAULT_PRIORITY

log = logging.getLogger(__name__)

# A fire found less than this far in the past (sync lag, a busy loop) is
# fired normally: not a misfire for ``skip``, and a single late fire time is
# no catch-up for ``fire_once``.
MISFIRE_TOLERANCE_MS = 1000
# How long a deleted job's id is remembered (claimed fires of it end skipped).
DELETED_MEMORY_MS = 600_000


_NO_LABELS: dict[str, str] = {}
_EPOCH = from_ms(0)
# Interned values (schedules, targets, policy groups, parsed times) are shared
# by every job with the same one; the caches are emptied when they grow past
# this, which only ends sharing for jobs loaded afterwards.
INTERN_MAX = 200_000
# Decoded targets kept for reuse (jobs with one target share one object, and
# its prepared request); bounded: jobs with unique targets decode theirs per fire.
TARGET_CACHE_MAX = 4096
# Jobs built for fires, kept for the next fire of the same job (while its
# state is the held one): a job that fires often is built once, not per fire
# on each of its owners; bounded, so a table of a million jobs firing rarely
# costs no more than building each as it fires.
JOB_CACHE_MAX = 16_384


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
        self.view = 0  # bumped with every ownership change
        self.view_key = view_key(self.ownership.nodes)  # the same, comparable between nodes
        self._fires: list[Fire] = []  # catch-up fires found when loading jobs
        self._cursors: list[Cursor] = []
        self._misfires_skipped = 0  # fire times passed over, not yet taken
        # Due entries of this node's own jobs at or below the default
        # priority, held back while its dispatch is far behind (``pop_due``
        # with ``hold``), by job id, in the order they were popped.
        self._held: dict[str, Entry] = {}
        self._held_oldest: int | None = None
        self.bad_jobs = 0
        self._interned: dict[Any, Any] = {}  # texts and Common records shared by jobs
        self._times: dict[tuple[Any, ...], Times] = {}  # parsed schedules shared by jobs
        self._targets: dict[str, dict[str, Any]] = {}  # decoded targets, bounded
        self._built: dict[str, tuple[JobState, Job]] = {}  # jobs built for fires, bounded

    # -- queries ----------------------------------------------------------

    def job(self, st: JobState) -> Job:
        """A held job as a :class:`Job`. It carries the normalised schedule
        object, no labels, no cursor (``last_fire_at``, ``skipped_pending``:
        the table keeps those), and the epoch as ``created_at`` and
        ``updated_at``: the scheduler uses none of them (the creation time
        matters only when the job is first loaded). Built once per held
        state while it is recently used (``JOB_CACHE_MAX``): a change to the
        job makes a new state, and so a new :class:`Job`."""
        built = self._built.get(st.id)
        if built is not None and built[0] is st:
            return built[1]
        c = st.common
        job = Job(id=st.id, namespace=c.namespace, name=st.name, version=st.version,
                  schedule=st.times.schedule.to_dict(), target=self._target(st.target),
                  retry=c.retry, misfire=c.misfire, delivery=c.delivery,
                  concurrency=c.concurrency, priority=st.priority, start_at=c.start_at,
                  end_at=c.end_at, jitter=c.jitter, paused=st.paused, labels=_NO_LABELS,
                  dead_letter=c.dead_letter, created_at=_EPOCH, updated_at=_EPOCH,
                  depends_on=c.depends_on, calendars=c.calendars, buffer_limit=c.buffer_limit,
                  pause_after_failures=c.pause_after_failures, max_runs=c.max_runs)
        if len(self._built) >= JOB_CACHE_MAX:
            self._built.clear()
        self._built[st.id] = (st, job)
        return job

    def held_version(self, job_id: str) -> tuple[int, bool] | None:
        """(version, paused) of a held job, or None."""
        st = self.jobs.get(job_id)
        return None if st is None else (st.version, st.paused)

    def is_deleted(self, job_id: str) -> bool:
        return job_id in self.deleted

    def held_job(self, job_id: str) -> Job | None:
        st = self.jobs.get(job_id)
        return None if st is None else self.job(st)

    def held_jobs(self, job_ids: list[str]) -> dict[str, Job]:
        """The listed jobs this node holds, as :class:`Job` (a snapshot: call
        on the loop that owns the table, then hand it to other threads)."""
        return {job_id: self.job(st) for job_id in job_ids
                if (st := self.jobs.get(job_id)) is not None}

    def take_misfires_skipped(self) -> int:
        """Fire times passed over by the misfire policy since the last call."""
        n, self._misfires_skipped = self._misfires_skipped, 0
        return n

    def owns(self, job_id: str) -> bool:
        return self.ownership.owns(job_id)

    def next_due(self) -> int | None:
        """The due time (ms) of the earliest pending fire: 0 when catch-up
        fires wait, else the heap's head (may be stale), or None."""
        if self._fires or self._cursors:
            return 0
        return self.heap.peek_due()

    def oldest_pending_due(self) -> int | None:
        """The earliest due time (ms) of a fire still in the table (catch-up
        fires found on load included), or None; a lower bound (the heap's
        head may be stale)."""
        dues = [d for d in (self.heap.peek_due(), self._held_oldest) if d is not None]
        if self._fires:
            dues.append(min(f.due_ms for f in self._fires))
        return min(dues) if dues else None

    @property
    def held(self) -> int:
        """Due fires held back (see ``pop_due``)."""
        return len(self._held)

    def release_held(self) -> None:
        """Give the fires held back to the next ``pop_due``, ahead of those
        that fell due after them."""
        if self._held:
            self.heap.requeue(list(self._held.values()))
            self._held = {}
            self._held_oldest = None

    def _live(self, e: Entry) -> bool:
        return self.jobs.get(e[2]) is e[4]

    # -- jobs coming in ---------------------------------------------------

    def load_row(self, row: JobRow, now_ms: int) -> bool:
        """Take in a live job read from the database (start, gain, or a change
        announcement): no :class:`Job` is built, and each distinct shared text
        is decoded once. Returns whether this node owns it."""
        h = job_hash(row.id)
        return self._hold(row.id, h, row.version, row.paused,
                          lambda: self._state_from_row(row, h), row.last_fire_at,
                          row.created_at, now_ms)

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

    def _state_from_row(self, row: JobRow, h: int) -> JobState | None:
        (job_id, namespace, name, version, schedule, target, retry, misfire, delivery,
         concurrency, priority, start_at, end_at, jitter, paused, dead_letter, created_at,
         _change_seq, _last_fire_at, skipped_pending, depends_on, calendars, buffer_limit,
         pause_after_failures, max_runs) = row
        if dead_letter == "null":
            dead_letter = None
        if depends_on == "null":
            depends_on = None
        if calendars == "null":
            calendars = None
        try:
            times = self._times_of(job_id, created_at, schedule, start_at, end_at, jitter)
        except Exception as exc:  # a stored job the schedule code refuses: never crash
            self._refused(job_id, exc)
            return None
        key = ("common", namespace, retry, misfire, delivery, concurrency, start_at, end_at,
               jitter, dead_letter, depends_on, calendars, buffer_limit, pause_after_failures,
               max_runs)
        common = self._interned.get(key)
        if common is None:
            common = self._intern_as(key, Common(
                self._intern(namespace), json.loads(retry), json.loads(misfire), delivery,
                concurrency, start_at, end_at, jitter,
                None if dead_letter is None else json.loads(dead_letter),
                None if depends_on is None else json.loads(depends_on),
                None if calendars is None else json.loads(calendars),
                buffer_limit, pause_after_failures, max_runs))
        return JobState(job_id, name, version, priority, paused, common,
                        self._intern(target), times, h, skipped_pending)

    def _refused(self, job_id: str, exc: Exception) -> None:
        self.bad_jobs += 1
        log.error("job %s has a schedule that cannot be computed, not scheduled: %s",
                  job_id, exc)

    def load(self, job: Job, now_ms: int) -> bool:
        """``load_row`` for a :class:`Job` (tombstones included: a deleted job
        is forgotten)."""
        if job.deleted_at is not None:
            self.forget(job.id, now_ms)
            return False
        return self.load_row(JobRow.of_job(job), now_ms)

    def forget(self, job_id: str, now_ms: int) -> None:
        """The job was deleted: drop it, and remember for a while that it was
        (claimed fires of it end ``skipped``)."""
        self.jobs.pop(job_id, None)
        self.others.pop(job_id, None)
        self._held.pop(job_id, None)
        self.deleted[job_id] = now_ms
        if len(self.deleted) > 10_000:
            for jid, at in list(self.deleted.items()):
                if now_ms - at > DELETED_MEMORY_MS:
                    del self.deleted[jid]

    def _drop(self, job_id: str, h: int) -> None:
        self.jobs.pop(job_id, None)
        self._held.pop(job_id, None)
        self.others[job_id] = h

    def _intern(self, value: Any) -> Any:
        got = self._interned.get(value)
        if got is None:
            if len(self._interned) >= INTERN_MAX:
                self._interned.clear()
            got = self._interned[value] = value
        return got

    def _times_of(self, job_id: str, created_at: datetime, text: str,
                  start_at: datetime | None, end_at: datetime | None,
                  jitter: float | None) -> Times:
        """The times of a job, from its schedule's JSON ``text`` (decoded only
        when needed). Cron schedules are shared between jobs with the same
        text and window (and, where ``H`` appears, the same resolved seconds
        and minutes) when there is no jitter; other schedules are small and
        parsed per job."""
        if not jitter:
            shared = self._times.get((text, start_at, end_at))
            if shared is not None:
                return shared
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
        parsed = None
        if isinstance(cron, str) and uses_job_id(cron):
            parsed = parse_schedule(spec, job_id=job_id, created_at=created_at)
            assert isinstance(parsed, CronSchedule)
            key += (parsed.expr.seconds, parsed.expr.minutes)
        times = self._times.get(key)
        if times is None:
            if parsed is None:
                parsed = parse_schedule(spec, job_id="", created_at=created_at)
            if len(self._times) >= INTERN_MAX:
                self._times.clear()
            times = self._times[key] = JobTimes(parsed, job_id="", start_at=start_at,
                                                end_at=end_at, jitter=None)
        return times

    def _target(self, text: str) -> dict[str, Any]:
        """A target object from its JSON text; recently decoded ones are reused."""
        target = self._targets.get(text)
        if target is None:
            if len(self._targets) >= TARGET_CACHE_MAX:
                self._targets.clear()
            target = self._targets[text] = json.loads(text)
        return target

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
        held = self._held.pop(st.id, None)
        if new is None:
            self.jobs.pop(st.id, None)
            return
        was_paused = st.paused
        new.cursor_ms = st.cursor_ms
        new.skipped_pending = st.skipped_pending
        self.jobs[st.id] = new
        if new.paused:
            return
        if held is not None:  # due, held back: it fires all the same, as the job is now
            self._push(new, held[3])
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
        # Listed one by one: the fire times within grace, and for fire_all the
        # misfired ones too (the newest MAX_CATCH_UP); the rest are counted.
        list_lo = lo if st.policy == "fire_all" and lo is not None else grace_lo
        recent_lo = list_lo if lo is None else max(lo, list_lo)
        recent: list[int] = []
        older, older_last = 0, None
        if recent_lo <= horizon:
            recent, older = recent_fire_times(st.times, recent_lo, horizon)
        older_hi = min(recent_lo - 1, horizon)
        if lo is None or lo <= older_hi:
            n, older_last = count_fire_times(st.times, lo, older_hi)
            older += n
        if not recent and not older:
            return
        plan = policies.plan_misfire(recent, older, now_ms, st.policy, st.grace_ms,
                                     older_cursor_ms=older_last)
        self._misfires_skipped += plan.skipped
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
        return Fire(job=self.job(st), fire_ms=fire_ms, due_ms=due_ms, skipped_before=skipped,
                    scheduled_for=t, primary=self._primary(st))

    # -- membership -------------------------------------------------------

    def _primary(self, st: JobState) -> str | None:
        """The job's first owner if it is another node (None: this node)."""
        if st.view != self.view:
            first = self.ownership.owners(st.hash)[0]
            st.primary = None if first == self.node_id else first
            st.view = self.view
        return st.primary

    def set_members(self, members: list[str]) -> list[str]:
        """Recompute ownership for a new member list. Jobs lost are dropped at
        once; returns the ids of jobs gained, which the caller loads from the
        database and passes to ``load``."""
        own = Ownership(members, self.node_id, self.replicas)
        if own == self.ownership:
            return []
        self.ownership = own
        self.view += 1
        self.view_key = view_key(own.nodes)
        held = list(self.jobs.items())
        if held:
            mask = own.owned_mask([st.hash for _, st in held])
            for (job_id, st), keep in zip(held, mask, strict=True):
                if not keep:
                    self._drop(job_id, st.hash)
        self.release_held()  # sorted again by their new first owners
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

    def prepare_row(self, row: JobRow) -> Prepared | None:
        """A job's state built from a lean row but not held: a standby for a
        gain expected soon (see ``admit_prepared``)."""
        st = self._state_from_row(row, job_hash(row.id))
        return None if st is None else Prepared(st, row.created_at)

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

    def pop_due(self, now_ms: int, until_ms: int, limit: int | None = None, *,
                ahead_ms: int = 0, hold: bool = False) -> tuple[list[Fire], list[Cursor]]:
        """Fires due by ``until_ms`` (``ahead_ms`` later for jobs above the
        default priority; plus catch-up fires found by ``load``) and cursors
        of jobs whose past fire times were skipped without a run; at most
        ``limit`` entries handled.

        With ``hold``, the due fires of jobs this node is first owner of, at
        or below the default priority, are held back instead (``held``): not
        claimed, and this node's through time stays before them; the next
        ``pop_due`` without ``hold`` gives them first, the misfire policy
        applying to those held past their job's grace. Fires of raised
        priorities, and those this node only watches for another first
        owner, are given as usual."""
        if not hold:
            self.release_held()
        fires, self._fires = self._fires, []
        cursors, self._cursors = self._cursors, []
        heap = self.heap
        held = self._held
        held_before = len(held)
        while limit is None or len(fires) + len(held) - held_before < limit:
            popped = heap.pop_due(until_ms, self._live, None if limit is None
                                  else limit - len(fires) - len(held) + held_before, ahead_ms)
            if not popped:
                break
            for entry in popped:
                due_ms, neg_priority, job_id, fire_ms, st = entry
                if hold and neg_priority >= -DEFAULT_PRIORITY and self._primary(st) is None:
                    held[job_id] = entry
                    oldest = self._held_oldest
                    self._held_oldest = due_ms if oldest is None else min(oldest, due_ms)
                    continue
                late = now_ms - due_ms
                if late > MISFIRE_TOLERANCE_MS and late > st.grace_ms:
                    st.cursor_ms = fire_ms - 1
                    self._catch_up(st, fire_ms - 1, now_ms, now_ms)
                    self._push_next(st, max(st.cursor_ms, now_ms))
                    fires.extend(self._fires)
                    cursors.extend(self._cursors)
                    self._fires, self._cursors = [], []
                    continue
                fires.append(Fire(self.job(st), fire_ms, due_ms, st.skipped_pending,
                                  primary=self._primary(st)))
                st.skipped_pending = 0
                st.cursor_ms = fire_ms
                self._push_next(st, fire_ms)
        if len(self.heap) > 2 * len(self.jobs) + 1024:
            self.heap.compact(self._live)
        return fires, cursors

