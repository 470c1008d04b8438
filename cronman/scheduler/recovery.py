"""Leases, the sweeper and API-requested runs of a scheduler node.

- **Lease renewal** (every lease/3): one statement extends the lease of every
  run this node holds; the same tick writes ``running`` for attempts that
  have lasted that long (short runs never cost that write). A renewal that
  touches fewer rows than expected means some run was taken from this node
  (replaced by another node, or swept after a stall): those runs are stopped
  here without another write.
- **Lease renewal** also covers runs that finished here but whose outcome
  still waits in the result writer (a slow or returning database): their rows
  say ``claimed`` until it is written, and must not look abandoned.
- **Sweeper** (every few seconds, cheap: a partial index): runs whose lease
  expired -- their node died or handed them back -- are taken over and
  re-dispatched as a new attempt (``at_least_once``; a ``retrying`` run under
  either delivery) or recorded ``lost`` with an error (``at_most_once``), which
  fires the dead-letter target. First, though, the sweeper reads the runs'
  outcome marks (``outcome_marks``; one coordinator call per batch): a run
  whose node learnt how it ended but died before writing it is recorded with
  that outcome, not sent again; one whose last attempt failed and waits for a
  retry gets the next attempt after that one. Without the coordinator the
  sweeper acts on the rows alone (receivers dedupe on the run id).
- **Requested runs** (trigger, replay, backfill stored by the API): taken on a
  ``RUNS_REQUESTED`` announcement and by polling, then dispatched at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.models import Job, Run, RunUpdate
from cronman.scheduler import policies
from cronman.scheduler.dispatch import ActiveRun
from cronman.scheduler.outcome_marks import OutcomeMark
from cronman.scheduler.ratelog import RateLimitedLog
from cronman.timeutil import now_ms, to_ms, utcnow

if TYPE_CHECKING:
    from cronman.scheduler.node import SchedulerNode

log = logging.getLogger(__name__)

TAKE_LIMIT = 500
# How many leases past its expiry a live node's run waits before a sweeper
# takes it anyway (a live node that lost track of it).
SPARE_LEASES = 2


class Recovery:
    def __init__(self, node: SchedulerNode) -> None:
        self.node = node
        self.requested_event = asyncio.Event()
        self._ratelog = RateLimitedLog(log)
        # Monotonic time since which the sweeper's calls succeed (None: failing).
        self._db_back_at: float | None = time.monotonic()

    # -- leases -----------------------------------------------------------

    async def renew_loop(self) -> None:
        node = self.node
        interval = max(0.2, node.settings.lease_seconds / 3)
        ok = True
        # After a failure, retry soon: leases run out while the database is away.
        while not await node.sleep(interval if ok else min(interval, 0.5)):
            ok = await self.renew_once()

    async def renew_once(self) -> bool:
        """Renew the leases of held runs; False when the database was unreachable."""
        node = self.node
        d = node.dispatcher
        until = utcnow() + timedelta(seconds=node.settings.lease_seconds)
        for u in d.running_updates(until):
            node.writer.update(u)
        waiting = node.writer.pending_update_keys()
        if waiting:
            try:
                await node.misc(node.store.runs.renew_leases, node.node_id, waiting, until)
            except StoreUnavailable as exc:
                node.metrics.store_errors.labels("renew_leases").inc()
                self._ratelog.error("renew", "cannot renew the leases of %d runs (database "
                                    "unreachable): %s", len(waiting), exc)
                return False
        keys = d.lease_keys()
        if not keys:
            return True
        try:
            renewed = await node.misc(node.store.runs.renew_leases, node.node_id, keys, until)
        except StoreUnavailable as exc:
            node.metrics.store_errors.labels("renew_leases").inc()
            self._ratelog.error("renew", "cannot renew the leases of %d runs (database "
                                "unreachable): %s", len(keys), exc)
            return False
        if renewed >= len(keys):
            return True
        # Some runs are no longer ours: find which (still held and not in flight here).
        held = [k for k in keys if d.holds(k[0])]
        job_ids = sorted({d.active[k[0]].job.id for k in held if k[0] in d.active})
        try:
            found = await node.misc(node.store.runs.in_flight_runs, job_ids)
        except StoreUnavailable:
            return False
        mine = {r.id for runs in found.values() for r in runs if r.node_id == node.node_id}
        for run_id, _ in held:
            ar = d.active.get(run_id)
            if ar is None or ar.pending_claim or node.writer.has_pending_claim(run_id):
                continue
            if run_id not in mine:
                node.writer.discard(run_id)
                d.drop(run_id, "the run was replaced or taken over by another node")
        return True

    # -- the sweeper ------------------------------------------------------

    async def sweep_loop(self) -> None:
        node = self.node
        while True:
            try:
                more = await self.sweep_once()
                if self._db_back_at is None:
                    self._db_back_at = time.monotonic()
            except StoreUnavailable as exc:
                node.metrics.store_errors.labels("sweep").inc()
                self._ratelog.error("sweep", "lease sweeper cannot reach the database: %s", exc)
                self._db_back_at = None
                more = False
            if await node.sleep(0 if more else node.sweep_interval):
                return

    async def sweep_once(self) -> bool:
        """Take over expired runs once; True when there may be more."""
        node = self.node
        now = utcnow()
        until = now + timedelta(seconds=node.settings.lease_seconds)
        runs, jobs, marks = await node.misc(self._take_expired, now, until)
        recorded = 0
        for run in runs:
            recorded += self._recover(run, jobs.get(run.job_id), marks.get(run.id))
        if recorded:
            log.info("recorded the outcome of %d runs whose node stopped before writing it "
                     "(from its outcome marks): not sent again", recorded)
        return len(runs) >= TAKE_LIMIT

    def _take_expired(self, now: Any, until: Any
                      ) -> tuple[list[Run], dict[str, Job], dict[str, OutcomeMark]]:
        node = self.node
        # Runs of nodes in the membership are spared: a live node writes its
        # runs' outcomes itself, late after a database outage that outlasted
        # their leases (taking them over would send them again). Only once it
        # has had the database for SPARE_LEASES leases and still let a run's
        # lease lapse that long is the run taken (it lost track of it). Our
        # own runs are not spared: expired ones are a former process's.
        spare = [m for m in node.members if m != node.node_id]
        grace = SPARE_LEASES * node.settings.lease_seconds
        back = self._db_back_at
        if back is None or time.monotonic() - back < grace:
            spare_before = now - timedelta(days=3650)  # spare them all for now
        else:
            spare_before = now - timedelta(seconds=grace)
        runs = node.store.runs.take_expired_runs(node.node_id, now, until, TAKE_LIMIT,
                                                 spare=spare, spare_before=spare_before)
        return runs, self._jobs_for(runs), self._marks_for(runs)

    def _marks_for(self, runs: list[Run]) -> dict[str, OutcomeMark]:
        """The outcome marks of ``runs`` that tell of their current attempt
        (a mark of an attempt before the row's is a replayed run's past)."""
        if not runs:
            return {}
        node = self.node
        try:
            texts = node.coordinator.read_outcomes([r.id for r in runs])
        except CoordinatorUnavailable as exc:
            node.metrics.coordinator_errors.labels("read_outcomes").inc()
            self._ratelog.warning("marks", "cannot read outcome marks (coordinator "
                                  "unreachable): expired runs are sent again: %s", exc)
            return {}
        marks = {}
        for run, text in zip(runs, texts, strict=True):
            mark = None if text is None else OutcomeMark.decode(text)
            if mark is not None and mark.attempt >= run.attempt:
                marks[run.id] = mark
        return marks

    def _jobs_for(self, runs: list[Run]) -> dict[str, Job]:
        """The jobs of ``runs``: from the table when held, else from the database
        (read on the worker thread; the table is only read here)."""
        node = self.node
        jobs: dict[str, Job] = {}
        missing = []
        for run in runs:
            st = node.table.jobs.get(run.job_id)
            if st is not None:
                jobs[run.job_id] = st.job
            else:
                missing.append(run.job_id)
        if missing:
            for job in node.store.jobs.get_jobs(sorted(set(missing))):
                jobs[job.id] = job
        return jobs

    def _recover(self, run: Run, job: Job | None, mark: OutcomeMark | None = None) -> bool:
        """Carry on with a run taken over; True when its outcome was recorded
        from its outcome mark."""
        node = self.node
        d = node.dispatcher
        if d.holds(run.id) or node.writer.has_pending_update(run.id):
            return False  # our own run whose renewal or outcome lagged: keep going
        if mark is not None and mark.final:
            self._record(run, job, mark)
            return True
        if mark is not None:  # its last attempt failed: the next one waits for its backoff
            u = mark.update(run.id, run.scheduled_for)
            run.status = "retrying"
            run.attempt = mark.attempt
            run.started_at = run.started_at or u.started_at
            run.lateness_ms = u.lateness_ms if run.lateness_ms is None else run.lateness_ms
            run.next_attempt_at = u.next_attempt_at or run.next_attempt_at
        if job is None or job.deleted_at is not None:
            self._lost(run, job, "lease expired (its node stopped) and the job was deleted: "
                                 "not re-dispatched")
            return False
        action = policies.recovery_action(job.delivery, run.status)
        node.metrics.recovered.labels(action).inc()
        if action == "lost":
            self._lost(run, job, "lost: the node running it stopped before it finished "
                                 "(lease expired); at_most_once: not re-dispatched")
            return False
        at = now_ms()
        if run.status == "retrying" and run.next_attempt_at is not None:
            at = max(at, to_ms(run.next_attempt_at))
        log.info("re-dispatching run %s of job %s (lease expired, attempt %d)", run.id, job.id,
                 run.attempt + 1)
        d.add(ActiveRun(run_id=run.id, job=job, scheduled_for=run.scheduled_for,
                        due_ms=to_ms(run.scheduled_for), attempt=run.attempt + 1,
                        origin=run.origin, skipped_before=run.skipped_before,
                        started_at=run.started_at, lateness_ms=run.lateness_ms,
                        status=run.status), at)
        return False

    def _record(self, run: Run, job: Job | None, mark: OutcomeMark) -> None:
        """Write the outcome a run's node marked before it stopped (its dead
        letter is sent again: nothing says the node's own went out)."""
        node = self.node
        node.metrics.recovered.labels("recorded").inc()
        u = mark.update(run.id, run.scheduled_for)
        node.writer.update(u)
        log.debug("run %s of job %s: %s (attempt %d) recorded from the mark of node %s",
                  run.id, run.job_id, mark.status, mark.attempt, mark.node_id)
        if (mark.status in ("failed", "lost") and job is not None and job.dead_letter
                and job.deleted_at is None):
            node.dispatcher.dead_letter(job, replace(
                run, status=u.status, attempt=mark.attempt, node_id=mark.node_id or run.node_id,
                started_at=u.started_at or run.started_at, finished_at=u.finished_at,
                lateness_ms=u.lateness_ms, duration_ms=u.duration_ms, result=u.result,
                error=u.error))

    def _lost(self, run: Run, job: Job | None, error: str) -> None:
        node = self.node
        now = utcnow()
        node.writer.update(RunUpdate(id=run.id, scheduled_for=run.scheduled_for, status="lost",
                                     finished_at=now, error=error, result=run.result))
        node.metrics.runs_finished.labels("lost").inc()
        log.warning("run %s of job %s recorded lost: %s", run.id, run.job_id, error)
        if job is not None and job.dead_letter and job.deleted_at is None:
            run.status = "lost"
            run.error = error
            run.finished_at = now
            node.dispatcher.dead_letter(job, run)

    # -- requested runs ---------------------------------------------------

    async def requested_loop(self) -> None:
        node = self.node
        while not node.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.requested_event.wait(), node.requested_poll)
            self.requested_event.clear()
            if node.stopping:
                return
            try:
                while await self.take_requested_once():
                    pass
            except StoreUnavailable as exc:
                node.metrics.store_errors.labels("take_requested").inc()
                self._ratelog.error("requested", "cannot take requested runs (database "
                                    "unreachable): %s", exc)

    async def take_requested_once(self) -> bool:
        node = self.node
        until = utcnow() + timedelta(seconds=node.settings.lease_seconds)
        runs, jobs = await node.misc(self._take_requested, until)
        now = now_ms()
        for run in runs:
            job = jobs.get(run.job_id)
            if job is None or job.deleted_at is not None:
                node.writer.update(RunUpdate(id=run.id, scheduled_for=run.scheduled_for,
                                             status="skipped", finished_at=utcnow(),
                                             error="job deleted before the run started"))
                continue
            node.dispatcher.add(ActiveRun(
                run_id=run.id, job=job, scheduled_for=run.scheduled_for,
                due_ms=to_ms(run.scheduled_for), attempt=max(1, run.attempt),
                origin=run.origin, skipped_before=run.skipped_before, check_job=False),
                max(now, to_ms(run.scheduled_for)))
        return len(runs) >= TAKE_LIMIT and not node.stopping

    def _take_requested(self, until: Any) -> tuple[list[Run], dict[str, Job]]:
        node = self.node
        runs = node.store.runs.take_requested_runs(node.node_id, until, TAKE_LIMIT)
        return runs, self._jobs_for(runs)
