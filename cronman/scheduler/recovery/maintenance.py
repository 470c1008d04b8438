"""Partition upkeep: daily run partitions created ahead and dropped past the
retention, hourly, by one node at a time (the store takes a database lock)."""

from __future__ import annotations

import logging

from cronman.errors import StoreUnavailable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import PartitionManager

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL = 3600.0
RETRY_INTERVAL = 60.0


class PartitionUpkeep:
    def __init__(self, partitions: PartitionManager, *, days_ahead: int, retention_days: int,
                 clock: ReferenceClock, pool: Pool, lifecycle: Lifecycle,
                 metrics: NodeMetrics) -> None:
        self._partitions = partitions
        self._clock = clock
        self._days_ahead = days_ahead
        self._retention_days = retention_days
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._ratelog = RateLimitedLog(log)

    async def run(self) -> None:
        while not self._lifecycle.stopping:
            try:
                await self._pool(self._partitions.run_maintenance, self._clock.now(), self._days_ahead,
                                 self._retention_days)
                delay = MAINTENANCE_INTERVAL
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("maintenance").inc()
                self._ratelog.error("maintenance", "partition upkeep failed, will retry: %s", exc)
                delay = RETRY_INTERVAL
            if await self._lifecycle.sleep(delay):
                return
