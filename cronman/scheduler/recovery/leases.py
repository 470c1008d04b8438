"""Leases of the runs a node holds.

Every lease/3 one statement extends the lease of every run this node holds;
the same tick writes ``running`` for attempts that have lasted that long
(short runs never cost that write). Runs that finished here but whose
outcome still waits in the result writer (a slow or returning database) are
renewed too: their rows say ``claimed`` until it is written, and must not
look abandoned. A renewal that touches fewer rows than expected means some
run was taken from this node (replaced by another node, or swept after a
stall): those runs are stopped here without another write. The same tick
reads the cancels an operator recorded on held container runs
(``dispatch.cancels``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from cronman.errors import StoreUnavailable
from cronman.scheduler.dispatch.cancels import cancel_error
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore
from cronman.vocabulary import NODE_CANCELLED_KINDS

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews the leases of held runs; hands them back on a graceful stop."""

    def __init__(self, node_id: str, runs: RunStore, dispatcher: Dispatcher,
                 writer: ResultWriter, *, lease_seconds: float, clock: ReferenceClock,
                 pool: Pool, lifecycle: Lifecycle, metrics: NodeMetrics) -> None:
        self.node_id = node_id
        self._clock = clock
        self._runs = runs
        self._dispatcher = dispatcher
        self._writer = writer
        self._lease_seconds = lease_seconds
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._ratelog = RateLimitedLog(log)

    async def run(self) -> None:
        interval = max(0.2, self._lease_seconds / 3)
        ok = True
        # After a failure, retry soon: leases run out while the database is away.
        while not await self._lifecycle.sleep(interval if ok else min(interval, 0.5)):
            ok = await self.renew_once()

    async def renew_once(self) -> bool:
        """Renew the leases of held runs; False when the database was unreachable."""
        d = self._dispatcher
        until = self._clock.now() + timedelta(seconds=self._lease_seconds)
        for u in d.running_updates(until):
            self._writer.update(u)
        waiting = self._writer.pending_update_keys()
        if waiting and await self._renew(waiting, until) is None:
            return False
        keys = d.lease_keys()
        if not keys:
            return True
        renewed = await self._renew(keys, until)
        if renewed is None:
            return False
        await self._read_cancels()
        if renewed >= len(keys):
            return True
        # Some runs are no longer ours: find which (still held and not in flight here).
        held = [k for k in keys if d.holds(k[0])]
        job_ids = sorted({d.active[k[0]].job.id for k in held if k[0] in d.active})
        try:
            found = await self._pool(self._runs.in_flight_runs, job_ids)
        except StoreUnavailable:
            return False
        mine = {r.id for runs in found.values() for r in runs if r.node_id == self.node_id}
        for run_id, _ in held:
            ar = d.active.get(run_id)
            if ar is None or ar.pending_claim or self._writer.has_pending_claim(run_id):
                continue
            if run_id not in mine:
                self._writer.discard(run_id)
                d.drop(run_id, "the run was replaced or taken over by another node")
        return True

    async def _read_cancels(self) -> None:
        """Carry out the cancels recorded on held runs an operator cancels
        through their node (``NODE_CANCELLED_KINDS``); unread ones wait for
        the next renewal."""
        d = self._dispatcher
        keys = [ar.key for ar in d.active.values()
                if not ar.pending_claim and not ar.done and ar.cancel_error is None
                and ar.job.target.get("kind") in NODE_CANCELLED_KINDS]
        if not keys:
            return
        try:
            found = await self._pool(self._runs.cancel_requests, keys)
        except StoreUnavailable as exc:
            self._ratelog.error("cancels", "cannot read the cancels of %d runs: %s",
                                len(keys), exc)
            return
        for run_id, request in found.items():
            d.cancels.cancel(run_id, cancel_error(request))

    async def _renew(self, keys: list[tuple[str, datetime]], until: datetime) -> int | None:
        try:
            return await self._pool(self._runs.renew_leases, self.node_id, keys, until)
        except StoreUnavailable as exc:
            self._metrics.store_errors.labels("renew_leases").inc()
            self._ratelog.error("renew", "cannot renew the leases of %d runs (database "
                                "unreachable): %s", len(keys), exc)
            return None

    async def hand_back(self, keys: list[tuple[str, datetime]], timeout: float) -> None:
        """Expire the leases of ``keys`` now (graceful stop): a sweeper takes
        the runs over at once instead of after a whole lease."""
        if not keys:
            return
        try:
            n = await asyncio.wait_for(
                self._pool(self._runs.renew_leases, self.node_id, keys,
                           self._clock.now() - timedelta(milliseconds=1)), timeout)
            log.info("handed back %d runs still in flight (their lease expired now)", n)
        except Exception as exc:
            log.error("could not hand back %d runs (they are recovered when their lease "
                      "expires): %r", len(keys), exc)
