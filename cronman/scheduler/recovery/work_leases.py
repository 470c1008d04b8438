"""The work queues' expiry, every second on every node (``WorkQueueStore.expire``):
leases that lapsed, attempts past their timeout, runs that waited too long
for capacity. Nodes share the work (the store skips rows another has
locked), so it goes on while any node lives. The same pass sends the worker
runs that ended ``failed`` or ``lost`` -- by expiry, a worker's report or a
cancel through the API -- to their job's dead letter (``take_ended``: each
to one node)."""

from __future__ import annotations

import logging
from typing import Protocol

from cronman.errors import StoreUnavailable
from cronman.models import Job, Run
from cronman.scheduler.jobs.source import JobSource
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import WorkQueueStore

log = logging.getLogger(__name__)

EXPIRY_INTERVAL = 1.0
EXPIRY_BATCH = 100


class DeadLetterSink(Protocol):
    """Where runs go to their job's dead-letter target (the dispatcher)."""

    def dead_letter(self, job: Job, run: Run) -> None: ...


class WorkLeases:
    """Runs the expiry pass, counts what it ended, and sends dead letters."""

    def __init__(self, work: WorkQueueStore, *, jobs: JobSource,
                 dead_letters: DeadLetterSink, clock: ReferenceClock, pool: Pool,
                 lifecycle: Lifecycle, metrics: NodeMetrics,
                 interval: float = EXPIRY_INTERVAL) -> None:
        self._work = work
        self._jobs = jobs
        self._dead_letters = dead_letters
        self._clock = clock
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._interval = interval
        self._ratelog = RateLimitedLog(log)

    async def run(self) -> None:
        while not self._lifecycle.stopping:
            try:
                while await self.expire_once() >= EXPIRY_BATCH:
                    pass  # a full batch: there may be more
                while await self.send_dead_letters() >= EXPIRY_BATCH:
                    pass
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("work_expiry").inc()
                self._ratelog.error("work_expiry", "work queue expiry failed, will retry: %s",
                                    exc)
            if await self._lifecycle.sleep(self._interval):
                return

    async def expire_once(self) -> int:
        """One pass; how many items it ended or re-queued."""
        report = await self._pool(self._work.expire, self._clock.now(), EXPIRY_BATCH)
        for reason, n in report.reasons.items():
            self._metrics.work_lease_expiries.labels(reason).inc(n)
        if report.total:
            log.info("work queues: %d re-queued, %d lost, %d failed", report.requeued,
                     report.lost, report.failed)
        return report.total

    async def send_dead_letters(self) -> int:
        """Send the runs that ended through their queue to their job's dead letter."""
        runs = await self._pool(self._work.take_ended, EXPIRY_BATCH)
        if not runs:
            return 0
        jobs = await self._jobs.jobs_of([r.job_id for r in runs])
        for run in runs:
            job = jobs.get(run.job_id)
            if job is not None and job.dead_letter:
                self._dead_letters.dead_letter(job, run)
        return len(runs)
