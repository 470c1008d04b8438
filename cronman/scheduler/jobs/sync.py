"""Job sync: what the node's job table holds follows the database and the membership.

- **First load**: every live job, streamed in batches (the next batch is
  read while one is applied); the table keeps the ones this node owns.
- **Announcements** (``NOTIFY`` on PostgreSQL, an in-process event in
  standalone) name changed jobs, heard on a **feed** thread; they are read
  again and applied. ``RUNS_REQUESTED`` and the other ``*`` announcements
  (upstream successes, calendar changes) are passed on (``JobEvents``).
- **Polling** every ``sync_poll_interval`` is the safety net: changes since
  the watermark as it was a few seconds ago (sequence numbers can commit out
  of order; re-applying a change is harmless).
- **Membership changes** recompute ownership: jobs lost are dropped at once,
  jobs gained are read and loaded (through the prepared ones first, see
  ``gains``).

Every change to the table is told (``JobEvents.table_changed``: the claimer
looks at its head again).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from cronman.errors import StoreUnavailable
from cronman.models import Job, JobRow
from cronman.scheduler.jobs.gains import GainPreparer, TableChanged
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.heap_trim import release_free_memory
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RUNS_REQUESTED, ChangeFeed, JobStore

log = logging.getLogger(__name__)

LOAD_BATCH = 5000  # jobs per batch of the first load
APPLY_CHUNK = 1000  # jobs applied per loop iteration before yielding
RELOAD_CHUNK = 5000  # jobs read per query when reloading (gained jobs, announcements)
POLL_LIMIT = 10_000  # changes read per poll query
FREEZE_AFTER = 10_000  # gained jobs loaded at once past which the cyclic GC pauses
WATERMARK_OVERLAP = 6.0  # seconds of change_seq history re-read by each poll


class JobEvents(TableChanged, Protocol):
    """What the job sync tells the stages above it (the node passes it on)."""

    def runs_requested(self) -> None:
        """Runs were asked for (``RUNS_REQUESTED``): look for them now."""

    def announced(self, item: str) -> None:
        """Another ``*`` announcement of the feed: an upstream's success, a
        calendar change."""


class JobSync:
    """Keeps the job table in step with the database and the membership."""

    def __init__(self, table: JobTable, jobs: JobStore, feed: Callable[[], ChangeFeed], *,
                 poll_interval: float, clock: ReferenceClock, pool: Pool, lifecycle: Lifecycle,
                 metrics: NodeMetrics, events: JobEvents) -> None:
        self.table = table
        self._jobs = jobs
        self._open_feed = feed
        self._clock = clock
        self._poll_interval = poll_interval
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._events = events
        self._gains = GainPreparer(table, jobs, pool, clock, events)
        self._members: list[str] = []
        self._changed = asyncio.Event()
        self._announced: set[str] = set()
        self._to_load: set[str] = set()
        self._reconcile_from = time.monotonic()  # when the gained jobs waiting came
        self._watermarks: deque[tuple[float, int]] = deque()
        self._watermark = 0
        self._feed_stop = threading.Event()
        self._feed_thread: threading.Thread | None = None
        self._ratelog = RateLimitedLog(log)

    # -- membership (a MembershipListener) ------------------------------------

    def members_changed(self, members: list[str]) -> None:
        self._members = members
        reconcile_from = time.monotonic()
        before = len(self.table.jobs)
        gained = self.table.set_members(members)
        dropped = before - len(self.table.jobs)
        if gained or dropped:
            log.info("ownership: %d jobs gained, %d dropped", len(gained), dropped)
        if gained:
            if not self._to_load:
                self._reconcile_from = reconcile_from
            self._to_load.update(gained)
            self._changed.set()
        self._metrics.owned_jobs.set(len(self.table.jobs))

    @property
    def settled(self) -> bool:
        """Whether every job this node owns is loaded (no gain waits to be read)."""
        return not self._to_load

    def member_silent(self, member: str | None) -> None:
        self._gains.member_silent(member, self._members)


    # -- the first load ---------------------------------------------------

    async def initial_load(self) -> None:
        """Load every live job, retrying while the database is unreachable."""
        delay = 0.5
        while not self._lifecycle.stopping:
            try:
                await self._load_all()
                return
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("load").inc()
                log.error("cannot load jobs (database unreachable), retrying in %.1f s: %s",
                          delay, exc)
                if await self._lifecycle.sleep(delay):
                    return
                delay = min(10.0, delay * 2)

    async def _load_all(self) -> None:
        start = self._watermark = await self._pool(self._jobs.current_change_seq)
        batches: Iterator[list[JobRow]] = self._jobs.iter_live_job_rows(LOAD_BATCH)
        total = 0
        loop = asyncio.get_running_loop()
        pending = loop.create_task(self._pool(next, batches, None))
        while True:
            batch = await pending
            if batch is None or self._lifecycle.stopping:
                break
            # Read the next batch while this one is applied.
            pending = loop.create_task(self._pool(next, batches, None))
            total += len(batch)
            await self._apply(batch)
        # Poll from where the load began, not from the largest change_seq it
        # read: a job read early may have changed (a smaller change_seq)
        # after the load's read of it, or before a later page was read.
        self._watermarks.append((time.monotonic(), start))
        log.info("loaded %d live jobs", total)

    # -- the feed ---------------------------------------------------------

    def start_feed(self) -> None:
        """Listen for announcements on a thread of its own."""
        loop = asyncio.get_running_loop()
        self._feed_thread = threading.Thread(target=self._listen, args=(loop,),
                                             name="cronman-feed", daemon=True)
        self._feed_thread.start()

    def stop_feed(self, *, wait: bool = True) -> None:
        """Stop the feed thread; with ``wait``, join it (up to a second: not
        from a loop that still has fires to start)."""
        self._feed_stop.set()
        if wait and self._feed_thread is not None:
            self._feed_thread.join(timeout=1.0)

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        feed: ChangeFeed | None = None
        while not self._feed_stop.is_set():
            try:
                if feed is None:
                    feed = self._open_feed()
                ids = feed.wait(0.5)
            except Exception as exc:
                self._ratelog.error("feed", "change feed failed (polling continues): %s", exc)
                with contextlib.suppress(Exception):
                    if feed is not None:
                        feed.close()
                feed = None
                self._feed_stop.wait(1.0)
                continue
            if ids:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._announce, list(ids))
        if feed is not None:
            with contextlib.suppress(Exception):
                feed.close()

    def _announce(self, ids: list[str]) -> None:
        for item in ids:
            if item == RUNS_REQUESTED:
                self._events.runs_requested()
            elif item.startswith("*"):
                self._events.announced(item)
            else:
                self._announced.add(item)
        if self._announced:
            self._changed.set()

    # -- the sync loop ----------------------------------------------------

    async def run(self) -> None:
        """Apply announcements, gained jobs and polled changes until the node stops."""
        next_poll = time.monotonic() + self._poll_interval
        while not self._lifecycle.stopping:
            timeout = max(0.0, next_poll - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
            self._changed.clear()
            if self._lifecycle.stopping:
                return
            taken: list[str] = []
            try:
                if self._announced:
                    taken, self._announced = list(self._announced), set()
                    await self._reload(taken)
                    taken = []
                if self._to_load:
                    await self._load_gained()
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self._poll_interval
                    await self._poll_changes()
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("sync").inc()
                self._ratelog.error("sync", "cannot read job changes (database unreachable), "
                                    "will retry: %s", exc)
                self._announced.update(taken)
                next_poll = min(next_poll, time.monotonic() + 1.0)
                await self._lifecycle.sleep(0.5)

    async def _load_gained(self) -> None:
        ids = list(self._to_load)
        bulk = len(ids) >= FREEZE_AFTER and gc.isenabled()
        if bulk:  # the cyclic GC would walk the new records again and again
            gc.disable()
        try:
            await self._reload(await self._gains.admit(ids))
        finally:
            if bulk:
                gc.freeze()  # they are long-lived, like the first load's (see the node)
                gc.enable()
                release_free_memory()
        self._to_load.difference_update(ids)
        if not self._to_load:
            took = time.monotonic() - self._reconcile_from
            self._metrics.reconcile_seconds.set(took)
            log.info("ownership reconciled: %d gained jobs loaded %.0f ms after the "
                     "membership change", len(ids), took * 1000)

    async def _reload(self, ids: list[str]) -> None:
        """Read ``ids`` again and apply them (reading the next chunk while one is
        applied); ids no longer live are forgotten."""
        chunks = [ids[i:i + RELOAD_CHUNK] for i in range(0, len(ids), RELOAD_CHUNK)]
        loop = asyncio.get_running_loop()
        found: set[str] = set()
        pending: asyncio.Task[list[JobRow]] | None = None
        waited = applied = 0.0
        try:
            for k, chunk in enumerate(chunks):
                t0 = time.perf_counter()
                rows = await (pending or self._pool(self._jobs.live_job_rows, chunk))
                t1 = time.perf_counter()
                pending = None
                if k + 1 < len(chunks):
                    pending = loop.create_task(self._pool(self._jobs.live_job_rows,
                                                          chunks[k + 1]))
                found.update(row.id for row in rows)
                await self._apply(rows)
                waited += t1 - t0
                applied += time.perf_counter() - t1
            if len(ids) > 1000:
                log.info("reloaded %d jobs: %.0f ms waiting for rows, %.0f ms applying them",
                         len(ids), waited * 1000, applied * 1000)
        finally:
            if pending is not None:  # an earlier chunk failed: drop the read ahead
                pending.cancel()
                pending.add_done_callback(
                    lambda t: t.cancelled() or t.exception())  # retrieved: no warning
        missing = set(ids) - found
        if missing:  # deleted, or purged tombstones: gone
            now = self._clock.now_ms()
            for job_id in missing:
                self.table.forget(job_id, now)

    async def _poll_changes(self) -> None:
        """Re-read changes from the watermark as it was ``WATERMARK_OVERLAP``
        seconds ago."""
        mono = time.monotonic()
        low = self._watermarks[0][1] if self._watermarks else 0
        for at, mark in self._watermarks:
            if at > mono - WATERMARK_OVERLAP:
                break
            low = mark
        while True:
            changed: list[Job] = await self._pool(self._jobs.jobs_changed_since, low, POLL_LIMIT)
            if not changed:
                break
            now = self._clock.now_ms()
            for job in changed:
                if job.deleted_at is not None:
                    self.table.forget(job.id, now)
            await self._apply([JobRow.of_job(j) for j in changed if j.deleted_at is None])
            low = max(low, changed[-1].change_seq)
            self._watermark = max(self._watermark, low)
            if len(changed) < POLL_LIMIT:
                break
        self._watermarks.append((mono, self._watermark))
        while len(self._watermarks) > 1 and self._watermarks[1][0] <= mono - WATERMARK_OVERLAP:
            self._watermarks.popleft()

    async def _apply(self, rows: Sequence[JobRow]) -> None:
        """Load ``rows`` into the table, a chunk per loop iteration."""
        table = self.table
        for start in range(0, len(rows), APPLY_CHUNK):
            now = self._clock.now_ms()
            for row in rows[start:start + APPLY_CHUNK]:
                table.load_row(row, now)
                if row.change_seq > self._watermark:
                    self._watermark = row.change_seq
            skipped = table.take_misfires_skipped()
            if skipped:
                self._metrics.misfires_skipped.inc(skipped)
            self._events.table_changed()
            await asyncio.sleep(0)
        self._metrics.owned_jobs.set(len(table.jobs))
