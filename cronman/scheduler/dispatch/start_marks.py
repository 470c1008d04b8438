"""Start marks: a fire claimed under a coordinator lock is marked started in
the coordinator right before its first attempt, batched per loop turn.

A replica watching the fire takes it over when it is not started shortly
after its due time (its holder died); the mark is what keeps the two from
both sending it. A call made for runs falling due also marks the runs due
within ``MARK_AHEAD_MS`` after them: at a steady rate one marker call then
serves several fires instead of one (a coordinator round trip per fire was
the largest part of a node's CPU per fire). Runs above the default priority
get a call of their own before they fall due, so that on a busy node their
timer finds the answer back: ``RAISED_MARK_AHEAD_MS`` before, or twice as
long as the lane's recent calls took from when they were due to go out until
their answers were carried out, if longer (at most
``MAX_RAISED_MARK_AHEAD_MS``). The price: a node killed right after such a
call leaves those few fires marked and unsent, and the lease sweeper sends
them when their lease runs out; a node that keeps up marks them ahead by
little. Runs of ``at_most_once`` jobs are not marked ahead (the sweeper
records such a run ``lost`` instead of sending it), nor are runs whose claim
still waits in the writer (which node holds them is not settled). The start
marker (``StartMarks``, below) answers once per run; ``StartMarkBatcher``
gathers the runs, calls it, and carries out the answers, handing the runs
back to the dispatcher through the ``MarkedRuns`` it was given.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol

from cronman.coordination.base import Coordinator
from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.models import Run
from cronman.scheduler.dispatch.duequeue import DueRuns
from cronman.scheduler.fires import LOCK_TTL_MS, ActiveRun
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore
from cronman.timeutil import to_ms
from cronman.vocabulary import DEFAULT_PRIORITY, DeliveryMode

log = logging.getLogger(__name__)

# Answers of a start marker, one per run.
START_GO = 1  # marked: send it
START_TAKEN = 0  # a replica took the fire over: drop it
START_UNREACHABLE = 2  # neither coordinator nor database could say
# A negative answer -n: the fire is due n ms from now by the reference clock
# (this node's clock runs fast): nothing was marked; ask again then.
StartMarker = Callable[[list[ActiveRun]], Awaitable[list[int]]]
# Whether this node still holds a run (asked before each retry it makes).
StillHeld = Callable[[ActiveRun], Awaitable[bool]]


class MarkedRuns(DueRuns, Protocol):
    """Where a run goes once its start mark is answered (the dispatcher):
    ``proceed``, ``due`` again (the clock ran fast, or the answer was not
    carried out) or ``let_go``."""

    def proceed(self, ar: ActiveRun) -> None:
        """Marked started: go on with the run (its gates, then its attempt)."""

    def let_go(self, ar: ActiveRun) -> None:
        """Stop holding ``ar`` without a write (taken over, or unconfirmed)."""


# Answers carried out per loop turn: a batch of hundreds answered at once
# (a node that is behind) would otherwise hold every timer -- a high-priority
# fire falling due -- for as long as all their attempts take to start.
ANSWERS_PER_TURN = 64
# Runs due this soon after a marker call goes out are marked in it too (well
# under the coordinator's early bound, ``EARLY_BOUND_MS``).
MARK_AHEAD_MS = 20
# Runs above the default priority get a call of their own at least this long
# before they fall due: on a node that is behind, the mark's round trip --
# several long loop turns -- is then over by the time their timer runs,
# instead of starting then. On such a node a call can take hundreds of ms
# from its timer to its answers (the overload bench: 40 ms ahead left 30-45 %
# of raised runs to be marked at their due time, p99 250-540 ms late), so the
# lead follows the lane's last PACE_CALLS calls, twice the longest, up to
# MAX_RAISED_MARK_AHEAD_MS (the fires a kill can leave to the lease sweeper).
RAISED_MARK_AHEAD_MS = 40
MAX_RAISED_MARK_AHEAD_MS = 500
PACE_CALLS = 32

# Where a run's start mark stands (``ActiveRun.marking``).
NOT_ASKED = 0
ASKED_DUE = 1  # in a marker call; go on with the run on a go-ahead
ASKED_AHEAD = 2  # in a marker call before its due time; its timer goes on with it


class _Lane:
    """Runs waiting for a marker call, and whether one is out for them.

    ``ahead_ms``: how long before their due time upcoming runs are marked.
    A lane that ``calls_ahead`` makes a call for them alone (a timer set for
    its earliest); the other lane only adds them to calls made for runs due.
    """

    __slots__ = ("batch", "marking", "upcoming", "ahead_ms", "calls_ahead", "timer", "timer_at",
                 "least_ahead_ms", "most_ahead_ms", "spans", "opened_ms")

    def __init__(self, ahead_ms: int, *, calls_ahead: bool, most_ahead_ms: int | None = None
                 ) -> None:
        self.batch: list[ActiveRun] = []
        self.marking = False
        # Runs waiting for their due time, to mark ahead: (due ms, seq, run).
        self.upcoming: list[tuple[int, int, ActiveRun]] = []
        self.ahead_ms = ahead_ms
        self.least_ahead_ms = ahead_ms
        self.most_ahead_ms = ahead_ms if most_ahead_ms is None else most_ahead_ms
        self.calls_ahead = calls_ahead
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0  # reference ms the timer is set for
        # How long the last calls took, from when each was due to go out
        # (its timer's time, or the run that asked) to its answers carried out.
        self.spans: deque[int] = deque(maxlen=PACE_CALLS)
        self.opened_ms = 0  # when the call going out now was due to go out

    def paced(self, span_ms: int) -> None:
        """A call took ``span_ms``: mark ahead by twice the longest recent one
        (a lane made without ``most_ahead_ms`` keeps its lead)."""
        if self.most_ahead_ms == self.least_ahead_ms:
            return
        self.spans.append(span_ms)
        self.ahead_ms = max(self.least_ahead_ms, min(self.most_ahead_ms, 2 * max(self.spans)))


class StartMarkBatcher:
    """Marks held runs started, all those of one loop turn in one marker call,
    one call at a time per lane: the runs added while a call is out go
    together in the next. A slow marker (the database, while the coordinator
    is down) thus gets fewer, larger calls as it falls behind, instead of a
    queue of one small call per loop turn that grows without end.

    Runs above the default priority have a lane of their own, with its own
    call out: on a node that is behind, they do not wait for a call carrying
    hundreds of overdue runs, nor for those runs' attempts to start. (While
    the coordinator is down both lanes' calls go to the database on one
    thread, one after the other.) Answers are carried out ``ANSWERS_PER_TURN``
    a turn, so a fire may stay marked and unsent for a few turns longer on a
    node that is behind: if the node dies then, the lease sweeper sends it.

    For each answer it hands the run back through ``runs`` (``MarkedRuns``:
    the dispatcher); it records what the writer and the metrics must know
    itself.
    """

    def __init__(self, marker: StartMarker, *, node_id: str, writer: ResultWriter,
                 metrics: NodeMetrics, clock: ReferenceClock,
                 side_tasks: set[asyncio.Task[Any]], runs: MarkedRuns) -> None:
        self._marker = marker
        self._node_id = node_id
        self._writer = writer
        self._metrics = metrics
        self._clock = clock
        self._side_tasks = side_tasks
        # Bound once: called per fire.
        self._proceed = runs.proceed
        self._due = runs.due
        self._let_go = runs.let_go
        self._raised = _Lane(RAISED_MARK_AHEAD_MS, calls_ahead=True,  # above the default priority
                             most_ahead_ms=MAX_RAISED_MARK_AHEAD_MS)
        self._rest = _Lane(MARK_AHEAD_MS, calls_ahead=False)
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ratelog = RateLimitedLog(log)

    def _lane(self, ar: ActiveRun) -> _Lane:
        return self._raised if ar.job.priority > DEFAULT_PRIORITY else self._rest

    def expect(self, ar: ActiveRun) -> None:
        """``ar`` falls due later (its timer is set): mark it ahead with a call
        made shortly before."""
        if (ar.mark_start and not ar.pending_claim
                and ar.job.delivery != DeliveryMode.AT_MOST_ONCE):
            self._seq += 1
            lane = self._lane(ar)
            heapq.heappush(lane.upcoming, (ar.due_ms, self._seq, ar))
            if lane.calls_ahead:
                self._arm(lane)

    def add(self, ar: ActiveRun) -> None:
        """Mark ``ar`` started with the others of this loop turn, if it is to
        be marked; ``proceed`` follows unless a replica took it over."""
        if not ar.mark_start:
            return
        if ar.marking != NOT_ASKED:  # marked ahead, the answer not back yet
            ar.marking = ASKED_DUE
            return
        ar.marking = ASKED_DUE
        lane = self._lane(ar)
        lane.batch.append(ar)
        if not lane.marking:
            lane.opened_ms = self._clock.now_ms()
            self._start_marking(lane)

    def _start_marking(self, lane: _Lane) -> None:
        # The task's first step runs after this turn's other callbacks: it
        # takes every run added meanwhile (one loop turn sooner than a flush
        # callback that would then start a task).
        lane.marking = True
        task = self._loop_now().create_task(self._mark(lane))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        """The loop the batcher runs on: the running one, remembered."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def _mark(self, lane: _Lane) -> None:
        try:
            while True:
                if lane.upcoming and (lane.batch or lane.calls_ahead):
                    self._take_upcoming(lane)
                if not lane.batch:
                    break
                batch, lane.batch = lane.batch, []
                try:
                    await self._mark_batch(batch)
                except Exception:  # a bug: the runs added meanwhile still get marked
                    log.exception("carrying out the start marks of %d runs failed "
                                  "unexpectedly", len(batch))
                now_ms = self._clock.now_ms()
                lane.paced(now_ms - lane.opened_ms)
                lane.opened_ms = now_ms  # the next call goes out at once
        finally:
            lane.marking = False
            if lane.calls_ahead:
                self._arm(lane)

    def _arm(self, lane: _Lane) -> None:
        """Set the lane's timer for its earliest upcoming run (a call out
        sets it again when it is over)."""
        if lane.marking or not lane.upcoming:
            return
        at = lane.upcoming[0][0] - lane.ahead_ms
        if lane.timer is not None:
            if lane.timer_at <= at:
                return
            lane.timer.cancel()
        loop = self._loop_now()
        lane.timer_at = at
        delay = max(0.0, (at - self._clock.now_ms()) / 1000.0)
        lane.timer = loop.call_at(loop.time() + delay, self._call_ahead, lane)

    def _call_ahead(self, lane: _Lane) -> None:
        lane.timer = None
        if not lane.marking:
            lane.opened_ms = lane.timer_at  # a busy loop runs the timer late: count it
            self._start_marking(lane)

    def _take_upcoming(self, lane: _Lane) -> None:
        """Add the runs due within the lane's ``ahead_ms`` to the call going out."""
        upcoming = lane.upcoming
        now_ms = self._clock.now_ms()
        horizon = now_ms + lane.ahead_ms
        while upcoming and upcoming[0][0] <= horizon:
            due_ms, _, ar = heapq.heappop(upcoming)
            # Not due yet, its wait still set (not let go, not retried). A run
            # due already waits for its turn in the dispatcher (a node that is
            # behind holds thousands), which asks for its mark then: marked
            # here, the whole backlog would go in one call, and every run
            # falling due meanwhile would wait for its answer.
            if (due_ms > now_ms and ar.mark_start and ar.marking == NOT_ASKED
                    and ar.handle is not None and not ar.pending_claim):
                ar.marking = ASKED_AHEAD
                lane.batch.append(ar)

    async def _mark_batch(self, batch: list[ActiveRun]) -> None:
        asked_ms = self._clock.now_ms()
        try:
            answers = await self._marker(batch)
        except asyncio.CancelledError:
            self._hand_back_unanswered(batch)
            raise
        except Exception:  # a marker must not raise; if it does, the claims still stand
            log.exception("marking %d fires started failed; sending them", len(batch))
            answers = [START_GO] * len(batch)
        done = 0
        try:
            for i, (ar, answer) in enumerate(zip(batch, answers, strict=True)):
                if i and not i % ANSWERS_PER_TURN:
                    await asyncio.sleep(0)
                done = i + 1
                self._carry_out(ar, answer, asked_ms)
        finally:
            self._hand_back_unanswered(batch[done:])

    def _carry_out(self, ar: ActiveRun, answer: int, asked_ms: int) -> None:
        ahead = ar.marking == ASKED_AHEAD
        ar.marking = NOT_ASKED
        if ar.done:
            return
        if ahead and answer != START_TAKEN:
            # Not due yet: its timer goes on with it, marked or (too early,
            # unconfirmed) to be marked then.
            if answer == START_GO:
                ar.mark_start = False
            return
        if answer < 0:  # too early by the reference clock: wait, then mark again
            self._early(ar, -answer - (self._clock.now_ms() - asked_ms))
            return
        ar.mark_start = False
        if answer == START_GO:
            self._proceed(ar)
        elif answer == START_TAKEN:
            self._taken(ar)
        else:
            self._unreachable(ar)

    def _hand_back_unanswered(self, runs: list[ActiveRun]) -> None:
        """Runs whose answer was not carried out (a bug, or the node
        stopping): one marked ahead waits for its timer as if never asked; one
        due goes back to the dispatcher, which asks again (or, if it fails
        again, records the run failed)."""
        loop = self._loop_now()
        for ar in runs:
            due = ar.marking == ASKED_DUE
            ar.marking = NOT_ASKED
            if due and not ar.done:
                ar.handle = loop.call_later(0, self._due, ar)

    def _early(self, ar: ActiveRun, due_in_ms: int) -> None:
        self._metrics.early_starts.inc()
        self._ratelog.warning("early", "run %s of job %s is due in %d ms by the "
                              "cluster's clock: this node's clock runs fast; waiting",
                              ar.run_id, ar.job.id, due_in_ms)
        loop = self._loop_now()
        ar.handle = loop.call_later(max(0, due_in_ms) / 1000.0, self._due, ar)

    def _taken(self, ar: ActiveRun) -> None:
        self._metrics.taken_over.inc()
        self._ratelog.warning("taken-over", "run %s of job %s was taken over by a "
                              "replica before this node started it (this node was "
                              "late): not sent from here", ar.run_id, ar.job.id)
        self._writer.withdraw(ar.run_id)
        self._let_go(ar)

    def _unreachable(self, ar: ActiveRun) -> None:
        """Neither the coordinator nor the database confirms the claim now:
        send nothing (a replica that reaches them takes the fire over). A
        claim still waiting in the writer is recorded ``skipped`` instead (and
        counted as not dispatched); a claim in the database is left to expire
        (the sweeper takes it over later)."""
        self._ratelog.error("start-unreachable", "run %s of job %s not sent: neither the "
                            "coordinator nor the database answered when it was due",
                            ar.run_id, ar.job.id)
        self._let_go(ar)
        if ar.pending_claim:
            self._metrics.not_dispatched.inc()
            self._writer.withdraw(ar.run_id)
            now = self._clock.now()
            self._writer.record_unreachable([Run(
                id=ar.run_id, job_id=ar.job.id, scheduled_for=ar.scheduled_for,
                status="skipped", attempt=1, node_id=self._node_id, origin=ar.origin,
                claimed_at=now, finished_at=now, skipped_before=ar.skipped_before,
                error=f"not dispatched: node {self._node_id} could reach neither the "
                      f"coordinator nor the database when the fire was due")])


# How early (by the reference clock) a fire may start at most: a node whose
# clock runs fast is held back at its start mark.
EARLY_BOUND_MS = 50


# ``Coordinator.start_fires``: marked, but the lock was gone or another's
# claim, so it cannot say this node still owns the fire.
LOCK_CANNOT_VOUCH = 2


class StartMarks:
    """The dispatcher's start marker: mark claimed fires started in the
    coordinator; when it cannot be reached, start them through the run row
    instead (a replica's takeover goes through the same row). A run whose
    lock was gone (expired, Redis restarted) or another's claim is started
    through its row too: a node that stalled past the lock's TTL finds the
    lock a replica took over (and sent the fire under) expired, and only
    the row, taken over with it, tells it not to send the fire again."""

    def __init__(self, node_id: str, coordinator: Coordinator, runs: RunStore, *,
                 lease_seconds: float, clock: ReferenceClock, pool: Pool,
                 metrics: NodeMetrics) -> None:
        self.node_id = node_id
        self._clock = clock
        self._coordinator = coordinator
        self._runs = runs
        self._lease_seconds = lease_seconds
        self._pool = pool
        self._metrics = metrics

    async def __call__(self, runs: list[ActiveRun]) -> list[int]:
        keys = [(ar.job.id, to_ms(ar.scheduled_for)) for ar in runs]
        # A fire marked ahead of its due time is checked as if due now: its
        # timer still waits for the due time, and what the early bound holds
        # back -- a node whose clock runs ahead of the coordinator's -- is the
        # same check however far ahead the mark is made.
        now_ms = self._clock.now_ms()
        try:
            marked = await self._coordinator.astart_fires(
                keys, LOCK_TTL_MS, due_ms=[min(ar.due_ms, now_ms) for ar in runs],
                early_ms=EARLY_BOUND_MS)
        except CoordinatorUnavailable:
            self._metrics.coordinator_errors.labels("start").inc()
            # A pending claim has no row to start.
            return await self._by_row(runs, [START_UNREACHABLE] * len(runs),
                                      [i for i, ar in enumerate(runs) if not ar.pending_claim])
        answers = [a if a < 0 else START_TAKEN if a == 0 else START_GO for a in marked]
        # A pending claim's row goes through the fence when it is written.
        unvouched = [i for i, a in enumerate(marked)
                     if a == LOCK_CANNOT_VOUCH and not runs[i].pending_claim]
        return await self._by_row(runs, answers, unvouched)

    async def still_held(self, ar: ActiveRun) -> bool:
        """Whether this node still holds ``ar``'s row (``StillHeld``, asked
        before a retry or the first attempt of a run taken over): its lease
        renewed and the attempt about to go out recorded, by compare-and-set.
        A node slow enough to be taken for gone finds a sweeper took the run
        -- and sends the next attempt itself; a sweeper that takes it after
        this sends the attempt after this one, never this one again. A claim
        whose row waits in the writer, or a database that cannot be reached,
        answers True: nobody can take the run through its row meanwhile."""
        if ar.pending_claim:
            return True
        until = self._clock.now() + timedelta(seconds=self._lease_seconds)
        try:
            return await self._pool(self._runs.hold_for_attempt, self.node_id, ar.key,
                                    ar.attempt, until)
        except StoreUnavailable:
            self._metrics.store_errors.labels("renew_leases").inc()
            return True

    async def _by_row(self, runs: list[ActiveRun], answers: list[int], in_db: list[int]
                      ) -> list[int]:
        """Start the runs at ``in_db`` through their rows (compare-and-set on
        this node's unstarted claim): GO where it held, TAKEN where the row
        is another's or started, UNREACHABLE when the database cannot say."""
        if not in_db:
            return answers
        now = self._clock.now()
        try:
            changed = await self._pool(
                self._runs.start_claimed_runs, self.node_id, [runs[i].key for i in in_db], now,
                now + timedelta(seconds=self._lease_seconds), self.node_id)
        except StoreUnavailable:
            self._metrics.store_errors.labels("start").inc()
            for i in in_db:
                answers[i] = START_UNREACHABLE
            return answers
        for i in in_db:
            answers[i] = START_GO if runs[i].run_id in changed else START_TAKEN
        return answers
