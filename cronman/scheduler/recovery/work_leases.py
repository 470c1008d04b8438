"""The work queues' expiry, every second on every node (``WorkQueueStore.expire``):
leases that lapsed, attempts past their timeout, runs that waited too long
for capacity. Nodes share the work (the store skips rows another has
locked), so it goes on while any node lives."""

from __future__ import annotations

import logging

from cronman.errors import StoreUnavailable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import WorkQueueStore

log = logging.getLogger(__name__)

EXPIRY_INTERVAL = 1.0
EXPIRY_BATCH = 100


class WorkLeases:
    """Runs the expiry pass and counts what it ended."""

    def __init__(self, work: WorkQueueStore, *, clock: ReferenceClock, pool: Pool,
                 lifecycle: Lifecycle, metrics: NodeMetrics,
                 interval: float = EXPIRY_INTERVAL) -> None:
        self._work = work
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
