"""The lease sweeper: runs whose node stopped renewing their lease are carried on.

Every few seconds (cheap: a partial index) runs whose lease expired -- their
node died or handed them back -- are taken over and re-dispatched as a new
attempt (``at_least_once``; a ``retrying`` run under either delivery) or
recorded ``lost`` with an error (``at_most_once``), which fires the dead-letter
target. First, though, the sweeper reads the runs' outcome marks
(``outcome_marks``; one coordinator call per batch): a run whose node learnt
how it ended but died before writing it is recorded with that outcome, not
sent again; one whose last attempt failed and waits for a retry gets the
next attempt after that one. Without the coordinator the sweeper acts on the
rows alone (receivers dedupe on the run id).

A row that shows no attempt yet (``attempt`` 0: a run the API requested --
trigger, backfill, an upstream's success) may still have had its first
attempt sent: its node sends it before its writer flushes the start. Such a
run is sent as attempt 2: a skipped attempt number is harmless, a repeated
one tells the receiver a re-delivery is the first try. (A fire of the
schedule is claimed as attempt 1 already.)
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from cronman.coordination.base import Coordinator
from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.models import Job, Run, RunUpdate
from cronman.scheduler import policies
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.jobs.source import JobSource
from cronman.scheduler.record.outcome_marks import OutcomeMark
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore
from cronman.timeutil import to_ms
from cronman.vocabulary import RunStatus

log = logging.getLogger(__name__)

TAKE_LIMIT = 500
# How many leases past its expiry a live node's run waits before a sweeper
# takes it anyway (a live node that lost track of it).
SPARE_LEASES = 2


class MemberView(Protocol):
    @property
    def members(self) -> list[str]:
        """The live membership as this node last saw it (its own id included)."""


class Sweeper:
    """Takes over runs whose lease expired and carries them on."""

    def __init__(self, node_id: str, jobs: JobSource, runs: RunStore, coordinator: Coordinator, dispatcher: Dispatcher, writer: ResultWriter,
                 membership: MemberView, *, lease_seconds: float, interval: float,
                 clock: ReferenceClock, pool: Pool, lifecycle: Lifecycle,
                 metrics: NodeMetrics) -> None:
        self.node_id = node_id
        self._clock = clock
        self._jobs = jobs
        self._runs = runs
        self._coordinator = coordinator
        self._dispatcher = dispatcher
        self._writer = writer
        self._membership = membership
        self._lease_seconds = lease_seconds
        self.interval = interval
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._ratelog = RateLimitedLog(log)
        # Monotonic time since which the sweeper's calls succeed (None: failing).
        self._db_back_at: float | None = time.monotonic()

    async def run(self) -> None:
        while True:
            try:
                more = await self.sweep_once()
                if self._db_back_at is None:
                    self._db_back_at = time.monotonic()
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("sweep").inc()
                self._ratelog.error("sweep", "lease sweeper cannot reach the database: %s", exc)
                self._db_back_at = None
                more = False
            if await self._lifecycle.sleep(0 if more else self.interval):
                return

    async def sweep_once(self) -> bool:
        """Take over expired runs once; True when there may be more."""
        now = self._clock.now()
        until = now + timedelta(seconds=self._lease_seconds)
        spare = [m for m in self._membership.members if m != self.node_id]
        took = time.monotonic()
        runs, marks = await self._pool(self._take_expired, now, until, spare)
        jobs = await self._jobs.jobs_of([r.job_id for r in runs]) if runs else {}
        recorded = 0
        for run in runs:
            # Its first attempt may have gone out before the row said so.
            run.attempt = max(run.attempt, 1)
            recorded += self._recover(run, jobs.get(run.job_id), marks.get(run.id), took)
        if recorded:
            log.info("recorded the outcome of %d runs whose node stopped before writing it "
                     "(from its outcome marks): not sent again", recorded)
        return len(runs) >= TAKE_LIMIT

    def _take_expired(self, now: datetime, until: datetime, spare: list[str]
                      ) -> tuple[list[Run], dict[str, OutcomeMark]]:
        # Runs of nodes in the membership are spared: a live node writes its
        # runs' outcomes itself, late after a database outage that outlasted
        # their leases (taking them over would send them again). Only once it
        # has had the database for SPARE_LEASES leases and still let a run's
        # lease lapse that long is the run taken (it lost track of it). Our
        # own runs are not spared: expired ones are a former process's.
        grace = SPARE_LEASES * self._lease_seconds
        back = self._db_back_at
        if back is None or time.monotonic() - back < grace:
            spare_before = now - timedelta(days=3650)  # spare them all for now
        else:
            spare_before = now - timedelta(seconds=grace)
        runs = self._runs.take_expired_runs(self.node_id, now, until, TAKE_LIMIT,
                                            spare=spare, spare_before=spare_before)
        return runs, self._marks_for(runs)

    def _marks_for(self, runs: list[Run]) -> dict[str, OutcomeMark]:
        """The outcome marks of ``runs`` that tell of their current attempt
        (a mark of an attempt before the row's is a replayed run's past)."""
        if not runs:
            return {}
        try:
            texts = self._coordinator.read_outcomes([r.id for r in runs])
        except CoordinatorUnavailable as exc:
            self._metrics.coordinator_errors.labels("read_outcomes").inc()
            self._ratelog.warning("marks", "cannot read outcome marks (coordinator "
                                  "unreachable): expired runs are sent again: %s", exc)
            return {}
        marks = {}
        for run, text in zip(runs, texts, strict=True):
            mark = None if text is None else OutcomeMark.decode(text)
            if mark is not None and mark.attempt >= run.attempt:
                marks[run.id] = mark
        return marks

    def _recover(self, run: Run, job: Job | None, mark: OutcomeMark | None = None,
                 took: float | None = None) -> bool:
        """Carry on with a run taken over (at monotonic ``took``); True when
        its outcome was recorded from its outcome mark."""
        d = self._dispatcher
        if d.holds(run.id) or self._writer.has_pending_update(run.id):
            return False  # our own run whose renewal or outcome lagged: keep going
        if took is not None and d.ended.since(run.id, took):
            # Ours, and it ended here while its outcome marks were read (a
            # coordinator slow to answer): its next attempt went out from here.
            return False
        if mark is not None and mark.final:
            self._record(run, job, mark)
            return True
        if mark is not None:  # its last attempt failed: the next one waits for its backoff
            u = mark.update(run.id, run.scheduled_for)
            run.status = RunStatus.RETRYING.value
            run.attempt = mark.attempt
            run.started_at = run.started_at or u.started_at
            run.lateness_ms = u.lateness_ms if run.lateness_ms is None else run.lateness_ms
            run.next_attempt_at = u.next_attempt_at or run.next_attempt_at
        if job is None or job.deleted_at is not None:
            self._lost(run, job, "lease expired (its node stopped) and the job was deleted: "
                                 "not re-dispatched")
            return False
        action = policies.recovery_action(job.delivery, run.status)
        self._metrics.recovered.labels(action).inc()
        if action == "lost":
            self._lost(run, job, "lost: the node running it stopped before it finished "
                                 "(lease expired); at_most_once: not re-dispatched")
            return False
        now = at = self._clock.now_ms()
        if run.status == RunStatus.RETRYING and run.next_attempt_at is not None:
            at = max(at, to_ms(run.next_attempt_at))
        log.info("re-dispatching run %s of job %s (lease expired, attempt %d)", run.id, job.id,
                 run.attempt + 1)
        d.add(ActiveRun.of_swept(run, job, now), at)
        return False

    def _record(self, run: Run, job: Job | None, mark: OutcomeMark) -> None:
        """Write the outcome a run's node marked before it stopped (its dead
        letter is sent again: nothing says the node's own went out)."""
        self._metrics.recovered.labels("recorded").inc()
        u = mark.update(run.id, run.scheduled_for)
        if job is not None and job.counts_runs:
            u.counted_job = job.id
        self._writer.update(u)
        log.debug("run %s of job %s: %s (attempt %d) recorded from the mark of node %s",
                  run.id, run.job_id, mark.status, mark.attempt, mark.node_id)
        if (mark.status in (RunStatus.FAILED, RunStatus.LOST) and job is not None
                and job.dead_letter and job.deleted_at is None):
            self._dispatcher.dead_letter(job, replace(
                run, status=u.status, attempt=mark.attempt, node_id=mark.node_id or run.node_id,
                started_at=u.started_at or run.started_at, finished_at=u.finished_at,
                lateness_ms=u.lateness_ms, duration_ms=u.duration_ms, result=u.result,
                error=u.error))

    def _lost(self, run: Run, job: Job | None, error: str) -> None:
        now = self._clock.now()
        lost = RunStatus.LOST.value
        self._writer.update(RunUpdate(id=run.id, scheduled_for=run.scheduled_for, status=lost,
                                      finished_at=now, error=error, result=run.result,
                                      counted_job=run.job_id if job is not None
                                      and job.counts_runs else None))
        self._metrics.runs_finished.labels(lost).inc()
        if job is not None:
            self._metrics.namespaces.failed(job.namespace)
        log.warning("run %s of job %s recorded lost: %s", run.id, run.job_id, error)
        if job is not None and job.dead_letter and job.deleted_at is None:
            run.status = lost
            run.error = error
            run.finished_at = now
            self._dispatcher.dead_letter(job, run)
