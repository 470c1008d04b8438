"""A scheduler node: sync, due, claim, dispatch, recover (DESIGN.md, "The life of one fire").

Threads:

- the **event loop** (the thread calling ``run``/``main``) owns the job table
  and its timer heap, the dispatcher and every HTTP delivery (aiohttp); it
  never blocks on I/O;
- one **claim** thread runs ``claim_batch`` (a Redis pipeline, then one
  database commit) for each batch of fires;
- one **write** thread flushes the result writer (one commit per batch);
- a small **misc** pool runs the other database and coordinator calls (sync
  reads, lease renewal, sweeper, requested runs, heartbeats, partitions);
- one **feed** thread blocks on ``store.feed().wait()`` and hands the
  announced job ids to the loop.

The claimer pops every fire due within ``claim_lead`` seconds, claims them as
one batch at most every ``claim_interval`` seconds, and schedules each winner
at its exact due time: claim latency stays out of lateness, and a node makes
a handful of commits per second whatever the fire rate.

Claiming ahead means a node that dies holds claims it will never start. So
the fires a node loses to a replica's lock stay on *standby*: the winner
marks each fire started in the coordinator right before sending it
(``start_fires``, on a **start** thread), and a fire still unmarked
``takeover_after`` seconds past its due time is taken over
(``take_over_batch`` on the claim thread) and sent from here. A killed node
thus delays its claimed fires by well under a second instead of leaving them
to the lease sweeper, and the coordinator (or, without it, the run row)
keeps the two from both sending one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry

from cronman.config import Settings
from cronman.errors import CoordinatorUnavailable, StoreUnavailable
from cronman.scheduler.claims import (
    LOCK_TTL_MS,
    Cursor,
    Fire,
    claim_batch,
    take_over_batch,
)
from cronman.scheduler.coordination.memory import InProcessCoordinator
from cronman.scheduler.coordinator import NodeInfo
from cronman.scheduler.dispatch import (
    START_GO,
    START_TAKEN,
    START_UNREACHABLE,
    ActiveRun,
    Dispatcher,
)
from cronman.scheduler.heap_trim import release_free_memory
from cronman.scheduler.jobtable import JobTable, Prepared
from cronman.scheduler.metrics import NodeMetrics
from cronman.scheduler.outcome_marks import MARK_TTL_LEASES, OutcomeMarker
from cronman.scheduler.ratelog import RateLimitedLog
from cronman.scheduler.recovery import Recovery
from cronman.scheduler.writer import ResultWriter
from cronman.store.base import RUNS_REQUESTED
from cronman.timeutil import now_ms, to_ms, utcnow

log = logging.getLogger(__name__)
T = TypeVar("T")

CLAIM_LEAD = 0.5  # seconds ahead of due time a fire is claimed (at most)
CLAIM_INTERVAL = 0.2  # seconds between claim batches under steady load
URGENT_LEAD = 0.15  # a fire due sooner than this is claimed without waiting for the interval
MAX_CLAIM_BATCH = 5000
# How long past its due time a fire claimed by a replica may stay unstarted
# before this node, its other owner, takes it over.
TAKEOVER_AFTER = 0.5
LOAD_BATCH = 5000
APPLY_CHUNK = 1000  # jobs applied per loop iteration before yielding
MEMBERSHIP_SETTLE_STEP = 1.0  # start: how long the membership must hold still before loading
MEMBERSHIP_SETTLE_MAX = 5.0  # start: the longest wait for it
SILENT_BEATS = 2.5  # heartbeat intervals without a beat before a member counts as silent
PREPARE_MAX = 250_000  # jobs prepared at most ahead of a gain (they cost memory meanwhile)
FREEZE_AFTER = 10_000  # gained jobs loaded at once past which the cyclic GC pauses
RELOAD_CHUNK = 5000  # jobs read per query when reloading (gained jobs, announcements)
WATERMARK_OVERLAP = 6.0  # seconds of change_seq history re-read by each poll
DRAIN_SECONDS = 5.0  # graceful stop: how long in-flight runs may finish
STOP_BUDGET = 9.0  # graceful stop: everything done within this
MAINTENANCE_INTERVAL = 3600.0
GIL_SWITCH_INTERVAL = 0.0005  # seconds (Python's default: 0.005)


class SchedulerNode:
    """One scheduler node. ``run()`` blocks until SIGTERM/SIGINT or ``request_stop()``."""

    def __init__(self, settings: Settings, store: Any, coordinator: Any,
                 targets: dict[str, Any], *, registry: CollectorRegistry | None = REGISTRY,
                 metrics: NodeMetrics | None = None, address: str = "",
                 claim_lead: float = CLAIM_LEAD, claim_interval: float = CLAIM_INTERVAL,
                 sweep_interval: float | None = None, requested_poll: float = 1.5,
                 run_maintenance: bool = True, takeover_after: float = TAKEOVER_AFTER) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.store = store
        self.coordinator = coordinator
        self.targets = targets
        self.metrics = metrics or NodeMetrics(registry)
        self.address = address
        self.claim_lead_ms = int(claim_lead * 1000)
        self.claim_interval_ms = int(claim_interval * 1000)
        self.urgent_lead_ms = min(int(URGENT_LEAD * 1000), self.claim_lead_ms)
        self.takeover_after_ms = int(takeover_after * 1000)
        self.sweep_interval = sweep_interval or max(0.5, min(5.0, settings.lease_seconds / 3))
        self.requested_poll = requested_poll
        self.run_maintenance = run_maintenance
        self.table = JobTable(self.node_id, settings.replicas)
        self.started_at = utcnow()
        self.lock_wins = 0
        self.lock_losses = 0
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self._ratelog = RateLimitedLog(log)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._announced: set[str] = set()
        self._to_load: set[str] = set()
        self._reconcile_from = time.monotonic()  # when the gained jobs waiting in _to_load came
        self._prepared_for: str | None = None  # the silent member whose jobs are prepared
        self._prepared: dict[str, Prepared] = {}
        self._watermarks: deque[tuple[float, int]] = deque()
        self._watermark = 0
        self._feed_stop = threading.Event()
        self._claim_pool = ThreadPoolExecutor(1, thread_name_prefix="cronman-claim")
        self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="cronman-write")
        self._misc_pool = ThreadPoolExecutor(3, thread_name_prefix="cronman-misc")
        # Membership calls get a thread of their own: a slow database (sync,
        # sweeper, partition upkeep on the misc pool) must never hold back the
        # heartbeat, or live nodes drop out of the membership.
        self._beat_pool = ThreadPoolExecutor(1, thread_name_prefix="cronman-beat")
        # Start marks sit right before each first attempt: never behind a claim.
        self._start_pool = ThreadPoolExecutor(1, thread_name_prefix="cronman-start")
        self._standby: list[tuple[int, int, Fire]] = []  # heap: (take-over time, seq, fire)
        self._standby_seq = 0
        self._standby_wake: asyncio.Event | None = None
        self.writer = ResultWriter(store, self._write_pool, self.metrics,
                                   lease_seconds=settings.lease_seconds,
                                   on_claims_written=self._claims_written,
                                   node_id=self.node_id)
        self.outcome_marks = OutcomeMarker(
            coordinator, self.node_id, int(MARK_TTL_LEASES * settings.lease_seconds * 1000),
            self.metrics)
        self.dispatcher = Dispatcher(node_id=self.node_id, targets=targets, writer=self.writer,
                                     metrics=self.metrics, max_in_flight=settings.max_in_flight,
                                     lease_seconds=settings.lease_seconds,
                                     lookup=self.table.lookup,
                                     start_marker=self._mark_started,
                                     on_outcome=self.outcome_marks.add)
        self.recovery = Recovery(self)
        self._members: list[str] = [self.node_id]

    # -- running ----------------------------------------------------------

    def run(self) -> None:
        """Run until SIGTERM/SIGINT (or ``request_stop``), then stop gracefully."""
        # The event loop does I/O and gives up the GIL at every syscall; the
        # database threads run long stretches of Python (binding parameters).
        # With the default 5 ms switch interval the loop waits up to 5 ms to
        # get the GIL back after each syscall, and its throughput collapses
        # while a batch is written (the convoy effect). A shorter interval
        # makes the database threads yield sooner.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        asyncio.run(self.main(install_signals=True))

    def request_stop(self) -> None:
        """Ask the node to stop (thread-safe)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    async def main(self, install_signals: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
        tasks: list[asyncio.Task[None]] = []
        feed_thread: threading.Thread | None = None
        try:
            await self._start_membership()
            # Heartbeat from the moment the node has joined: a first load that
            # takes longer than the TTL must not make it drop out (and back in).
            tasks.append(loop.create_task(self._forever("heartbeat", self._heartbeat_loop)))
            if self.run_maintenance:
                tasks.append(loop.create_task(self._forever("maintenance", self._maintenance)))
            await self._initial_load()
            if self._stop.is_set():
                return
            feed_thread = threading.Thread(target=self._feed_thread, name="cronman-feed",
                                           daemon=True)
            feed_thread.start()
            tasks += [
                loop.create_task(self._forever("sync", self._sync_loop)),
                loop.create_task(self._forever("leases", self.recovery.renew_loop)),
                loop.create_task(self._forever("sweeper", self.recovery.sweep_loop)),
                loop.create_task(self._forever("requested", self.recovery.requested_loop)),
            ]
            self._standby_wake = asyncio.Event()
            tasks.append(loop.create_task(self._forever("standby", self._standby_loop)))
            claimer = loop.create_task(self._forever("claimer", self._claimer))
            writer = loop.create_task(self.writer.run(self._stop))
            self.metrics.owned_jobs.set(len(self.table.jobs))
            # The job table is long-lived: keep the cyclic GC from walking it
            # again and again (a full collection over 100k records costs
            # hundreds of ms, in the middle of a reconcile or a fire batch).
            gc.freeze()
            release_free_memory()
            log.info("scheduler node %s ready: owns %d of %d live jobs (%d members, "
                     "replicas %d)", self.node_id, len(self.table.jobs),
                     len(self.table.jobs) + len(self.table.others), len(self._members),
                     self.settings.replicas)
            self.ready.set()
            await self._stop.wait()
            log.info("scheduler node %s stopping", self.node_id)
            await self._shutdown(claimer, writer, tasks)
        finally:
            self._feed_stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for target in self.targets.values():
                with contextlib.suppress(Exception):
                    await target.close()
            if feed_thread is not None:
                feed_thread.join(timeout=1.0)
            for pool in (self._claim_pool, self._write_pool, self._misc_pool, self._beat_pool,
                         self._start_pool):
                pool.shutdown(wait=False, cancel_futures=True)
            self.outcome_marks.close()
            self.stopped.set()
            log.info("scheduler node %s stopped", self.node_id)

    async def _forever(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """Run a loop; an unexpected error is logged and the loop restarted."""
        assert self._stop is not None
        while not self._stop.is_set():
            try:
                await fn()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler %s loop failed; restarting it in 1 s", name)
                await self.sleep(1.0)

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the node is stopping."""
        assert self._stop is not None
        if self._stop.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
        return self._stop.is_set()

    @property
    def members(self) -> list[str]:
        """The live membership as this node last saw it (its own id included)."""
        return list(self._members)

    @property
    def stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def misc(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call on the misc pool."""
        assert self._loop is not None
        return await self._loop.run_in_executor(self._misc_pool, partial(fn, *args))

    async def beat(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a membership call (join, heartbeat, members, leave) on its own thread."""
        assert self._loop is not None
        return await self._loop.run_in_executor(self._beat_pool, partial(fn, *args))

    # -- membership -------------------------------------------------------

    def node_info(self) -> NodeInfo:
        return NodeInfo(id=self.node_id, address=self.address, started_at=self.started_at,
                        last_heartbeat=utcnow(), stats={
                            "owned_jobs": len(self.table.jobs),
                            "fires_last_minute": self.dispatcher.fires_last_minute.value(),
                            "lock_wins": self.lock_wins,
                            "lock_losses": self.lock_losses,
                            "in_flight": self.dispatcher.running,
                        })

    async def _start_membership(self) -> None:
        try:
            await self.beat(self.coordinator.join, self.node_info())
            members = await self.beat(self.coordinator.live_members)
            self._set_members([m.id for m in members])
            # Nodes of a cluster started together join within a moment of each
            # other: wait until the membership holds still for a beat, so the
            # first load reads only this node's share (not every job, to drop
            # most of them again when the others show up).
            step = 0.0 if isinstance(self.coordinator, InProcessCoordinator) \
                else MEMBERSHIP_SETTLE_STEP  # in-process: every member is here already
            settle_until = time.monotonic() + MEMBERSHIP_SETTLE_MAX
            while step and time.monotonic() < settle_until:
                if await self.sleep(step):
                    return
                before = self._members
                members = await self.beat(self.coordinator.live_members)
                self._set_members([m.id for m in members])
                if self._members == before:
                    break
        except CoordinatorUnavailable as exc:
            self.metrics.coordinator_errors.labels("join").inc()
            log.error("coordinator unreachable at start (%s): acting on a membership of one "
                      "until it answers", exc)

    def _set_members(self, ids: list[str]) -> None:
        ids = sorted(set(ids) | {self.node_id})
        if ids == self._members:
            return
        log.info("membership changed: %s", ", ".join(ids))
        self._members = ids
        reconcile_from = time.monotonic()
        before = len(self.table.jobs)
        gained = self.table.set_members(ids)
        dropped = before - (len(self.table.jobs))
        if gained or dropped:
            log.info("ownership: %d jobs gained, %d dropped", len(gained), dropped)
        if gained:
            if not self._to_load:
                self._reconcile_from = reconcile_from
            self._to_load.update(gained)
            self._kick_sync()
        self.metrics.owned_jobs.set(len(self.table.jobs))

    async def _heartbeat_loop(self) -> None:
        interval = max(0.2, self.settings.heartbeat_ttl / 5)
        while not await self.sleep(interval):
            try:
                await self.beat(self.coordinator.heartbeat, self.node_info())
                members = await self.beat(self.coordinator.live_members)
            except CoordinatorUnavailable as exc:
                self.metrics.coordinator_errors.labels("heartbeat").inc()
                self._ratelog.error("heartbeat", "coordinator unreachable, keeping the last "
                                    "membership view: %s", exc)
                continue
            self._ratelog.clear("heartbeat")
            self._set_members([m.id for m in members])
            self._watch_for_silence(members, interval)
            self.metrics.owned_jobs.set(len(self.table.jobs))

    # -- jobs prepared ahead of an expected gain ------------------------------

    def _watch_for_silence(self, members: list[NodeInfo], interval: float) -> None:
        """When exactly one other member has missed heartbeats, prepare the jobs
        its departure would hand to this node, so that the gain is a matter of
        pushing timers; forget them when it beats again."""
        now = utcnow()
        silent = [m.id for m in members if m.id != self.node_id and m.last_heartbeat is not None
                  and (now - m.last_heartbeat).total_seconds() > SILENT_BEATS * interval]
        if len(silent) != 1:
            # Forget the prepared jobs when their member beats again (not when
            # it is gone: then the gain being loaded consumes them).
            if self._prepared_for is not None and self._prepared_for in {m.id for m in members}:
                self._prepared_for, self._prepared = None, {}
            return
        if silent[0] == self._prepared_for:
            return
        self._prepared_for, self._prepared = silent[0], {}
        assert self._loop is not None
        task = self._loop.create_task(self._prepare_gain(silent[0]))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _prepare_gain(self, member: str) -> None:
        ids = self.table.gained_without(member)
        if not ids or len(ids) > PREPARE_MAX:
            return
        prepared: dict[str, Prepared] = {}
        try:
            for start in range(0, len(ids), RELOAD_CHUNK):
                rows = await self.misc(self.store.jobs.live_job_rows,
                                       ids[start:start + RELOAD_CHUNK])
                if self._prepared_for != member:
                    return
                for k in range(0, len(rows), APPLY_CHUNK):
                    for row in rows[k:k + APPLY_CHUNK]:
                        got = self.table.prepare_row(row)
                        if got is not None:
                            prepared[row[0]] = got
                    await asyncio.sleep(0)
        except StoreUnavailable:
            return
        if self._prepared_for == member:
            self._prepared = prepared
            log.info("member %s is silent: %d jobs it would hand over are prepared",
                     member, len(prepared))

    async def _admit_prepared(self, ids: list[str]) -> list[str]:
        """Hold the prepared ones of ``ids`` still current; the rest to load."""
        ahead, self._prepared, self._prepared_for = self._prepared, {}, None
        ready = [i for i in ids if i in ahead]
        if not ready:
            return ids
        t0 = time.perf_counter()
        states = await self.misc(self.store.jobs.live_job_states, ready)
        t1 = time.perf_counter()
        now = now_ms()
        rest = [i for i in ids if i not in ahead]
        for n, job_id in enumerate(ready):
            fresh = states.get(job_id)
            if fresh is None or not self.table.admit_prepared(ahead[job_id], *fresh, now):
                rest.append(job_id)
            if n % APPLY_CHUNK == APPLY_CHUNK - 1:
                await asyncio.sleep(0)
        if self._wake is not None:
            self._wake.set()
        log.info("held %d prepared jobs (%.0f ms checking them, %.0f ms scheduling them); "
                 "%d to load", len(ids) - len(rest), (t1 - t0) * 1000,
                 (time.perf_counter() - t1) * 1000, len(rest))
        return rest

    # -- sync -------------------------------------------------------------

    async def _initial_load(self) -> None:
        delay = 0.5
        while not self.stopping:
            try:
                await self._load_all()
                return
            except StoreUnavailable as exc:
                self.metrics.store_errors.labels("load").inc()
                log.error("cannot load jobs (database unreachable), retrying in %.1f s: %s",
                          delay, exc)
                if await self.sleep(delay):
                    return
                delay = min(10.0, delay * 2)

    async def _load_all(self) -> None:
        self._watermark = await self.misc(self.store.jobs.current_change_seq)
        it = self.store.jobs.iter_live_job_rows(LOAD_BATCH)
        total = 0
        loop = asyncio.get_running_loop()
        pending = loop.create_task(self.misc(next, it, None))
        while True:
            batch = await pending
            if batch is None or self.stopping:
                break
            # Read the next batch while this one is applied.
            pending = loop.create_task(self.misc(next, it, None))
            total += len(batch)
            await self._apply_rows(batch)
        self._watermarks.append((time.monotonic(), self._watermark))
        log.info("loaded %d live jobs", total)

    async def _apply(self, jobs: list[Any]) -> None:
        for start in range(0, len(jobs), APPLY_CHUNK):
            now = now_ms()
            for job in jobs[start:start + APPLY_CHUNK]:
                self.table.load(job, now)
                if job.change_seq > self._watermark:
                    self._watermark = job.change_seq
            self._take_misfire_count()
            if self._wake is not None:
                self._wake.set()
            await asyncio.sleep(0)
        self.metrics.owned_jobs.set(len(self.table.jobs))

    async def _apply_rows(self, rows: list[tuple[Any, ...]]) -> None:
        """``_apply`` for lean rows (the initial load, reloads); column 17 is change_seq."""
        for start in range(0, len(rows), APPLY_CHUNK):
            now = now_ms()
            for row in rows[start:start + APPLY_CHUNK]:
                self.table.load_row(row, now)
                if row[17] > self._watermark:
                    self._watermark = row[17]
            self._take_misfire_count()
            if self._wake is not None:
                self._wake.set()
            await asyncio.sleep(0)
        self.metrics.owned_jobs.set(len(self.table.jobs))

    def _take_misfire_count(self) -> None:
        if self.table.misfires_skipped:
            self.metrics.misfires_skipped.inc(self.table.misfires_skipped)
            self.table.misfires_skipped = 0

    def _on_announced(self, ids: list[str]) -> None:
        for item in ids:
            if item == RUNS_REQUESTED:
                self.recovery.requested_event.set()
            else:
                self._announced.add(item)
        if self._announced:
            self._kick_sync()

    def _kick_sync(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _feed_thread(self) -> None:
        feed = None
        loop = self._loop
        assert loop is not None
        while not self._feed_stop.is_set():
            try:
                if feed is None:
                    feed = self.store.feed()
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
                    loop.call_soon_threadsafe(self._on_announced, list(ids))
        if feed is not None:
            with contextlib.suppress(Exception):
                feed.close()

    async def _sync_loop(self) -> None:
        assert self._changed is not None
        poll = self.settings.sync_poll_interval
        next_poll = time.monotonic() + poll
        while not self.stopping:
            timeout = max(0.0, next_poll - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
            self._changed.clear()
            if self.stopping:
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
                    next_poll = time.monotonic() + poll
                    await self._poll_changes()
            except StoreUnavailable as exc:
                self.metrics.store_errors.labels("sync").inc()
                self._ratelog.error("sync", "cannot read job changes (database unreachable), "
                                    "will retry: %s", exc)
                self._announced.update(taken)
                next_poll = min(next_poll, time.monotonic() + 1.0)
                await self.sleep(0.5)

    async def _load_gained(self) -> None:
        ids = list(self._to_load)
        bulk = len(ids) >= FREEZE_AFTER and gc.isenabled()
        if bulk:  # the cyclic GC would walk the new records again and again
            gc.disable()
        try:
            await self._reload(await self._admit_prepared(ids))
        finally:
            if bulk:
                gc.freeze()  # they are long-lived, like the first load's (see main)
                gc.enable()
                release_free_memory()
        self._to_load.difference_update(ids)
        if not self._to_load:
            took = time.monotonic() - self._reconcile_from
            self.metrics.reconcile_seconds.set(took)
            log.info("ownership reconciled: %d gained jobs loaded %.0f ms after the "
                     "membership change", len(ids), took * 1000)

    async def _reload(self, ids: list[str]) -> None:
        """Read ``ids`` again and apply them (reading the next chunk while one is
        applied); ids no longer live are forgotten."""
        chunks = [ids[i:i + RELOAD_CHUNK] for i in range(0, len(ids), RELOAD_CHUNK)]
        loop = asyncio.get_running_loop()
        found: set[str] = set()
        pending: asyncio.Task[list[tuple[Any, ...]]] | None = None
        waited = applied = 0.0
        try:
            for k, chunk in enumerate(chunks):
                t0 = time.perf_counter()
                rows = await (pending or self.misc(self.store.jobs.live_job_rows, chunk))
                t1 = time.perf_counter()
                pending = None
                if k + 1 < len(chunks):
                    pending = loop.create_task(self.misc(self.store.jobs.live_job_rows,
                                                         chunks[k + 1]))
                found.update(row[0] for row in rows)
                await self._apply_rows(rows)
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
            now = now_ms()
            for job_id in missing:
                self.table._forget(job_id, now)

    async def _poll_changes(self) -> None:
        """The safety net behind the feed: re-read changes from the watermark
        as it was ``WATERMARK_OVERLAP`` seconds ago (sequence numbers can
        commit out of order; re-applying a change is harmless)."""
        mono = time.monotonic()
        low = self._watermarks[0][1] if self._watermarks else 0
        for at, mark in self._watermarks:
            if at > mono - WATERMARK_OVERLAP:
                break
            low = mark
        while True:
            changed = await self.misc(self.store.jobs.jobs_changed_since, low, 10_000)
            if not changed:
                break
            await self._apply(changed)
            low = changed[-1].change_seq
            if len(changed) < 10_000:
                break
        self._watermarks.append((mono, self._watermark))
        while len(self._watermarks) > 1 and self._watermarks[1][0] <= mono - WATERMARK_OVERLAP:
            self._watermarks.popleft()

    # -- due and claim ----------------------------------------------------

    async def _claimer(self) -> None:
        assert self._wake is not None
        last_round = 0
        while not self.stopping:
            now = now_ms()
            nd = self.table.next_due()
            if nd is None:
                wait_ms = 1000
            else:
                wake_at = max(nd - self.claim_lead_ms,
                              min(last_round + self.claim_interval_ms, nd - self.urgent_lead_ms))
                wait_ms = wake_at - now
            if wait_ms > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait_ms / 1000.0)
                continue
            last_round = now
            fires, cursors = self.table.pop_due(now, now + self.claim_lead_ms, MAX_CLAIM_BATCH)
            self._take_misfire_count()
            if fires or cursors:
                await self.claim(fires, cursors)

    async def claim(self, fires: list[Fire], cursors: list[Cursor]) -> None:
        """Claim a batch on the claim thread and hand the winners to the dispatcher."""
        assert self._loop is not None
        started = time.perf_counter()
        call = partial(claim_batch, fires, cursors, coordinator=self.coordinator,
                       store=self.store, node_id=self.node_id,
                       lease_seconds=self.settings.lease_seconds, lock_ttl_ms=LOCK_TTL_MS)
        try:
            res = await self._loop.run_in_executor(self._claim_pool, call)
        except Exception:
            log.exception("claiming %d fires failed unexpectedly; they are not dispatched",
                          len(fires))
            return
        m = self.metrics
        m.claim_seconds.observe(time.perf_counter() - started)
        m.claim_batch.observe(len(fires))
        if res.lock_wins:
            m.lock_wins.inc(res.lock_wins)
        if res.lock_losses:
            m.lock_losses.inc(res.lock_losses)
        self.lock_wins += res.lock_wins
        self.lock_losses += res.lock_losses
        if res.fence_losses:
            m.fence_losses.inc(res.fence_losses)
        if res.coordinator_error:
            m.coordinator_errors.labels("claim").inc()
            self._ratelog.error("claim-coordinator", "coordinator unreachable: claiming "
                                "through the database fence alone (%s)", res.coordinator_error)
        else:
            self._ratelog.clear("claim-coordinator")
        self.writer.note_store(res.store_error is None)
        if res.store_error:
            m.store_errors.labels("claim").inc()
            if res.unreachable:
                m.not_dispatched.inc(len(res.unreachable))
                self._ratelog.error("claim-store", "neither the database (%s) nor the "
                                    "coordinator is reachable: %d fires not dispatched",
                                    res.store_error, len(res.unreachable))
                self.writer.record_unreachable(res.unreachable)
            else:
                self._ratelog.error("claim-store", "database unreachable (%s): dispatching "
                                    "under the coordinator lock alone; run rows kept to write "
                                    "later", res.store_error)
        else:
            self._ratelog.clear("claim-store")
        if res.pending_runs or res.pending_cursors:
            self.writer.insert_later(res.pending_runs, res.pending_cursors)
        pending = {r.id for r in res.pending_runs}
        locked = res.coordinator_error is None
        for f in res.dispatch:
            self.dispatcher.add(ActiveRun(
                run_id=f.run_id, job=f.job, scheduled_for=f.scheduled_for, due_ms=f.due_ms,
                attempt=1, origin="schedule", skipped_before=f.skipped_before,
                pending_claim=f.run_id in pending, mark_start=locked,
                remote_in_flight=res.in_flight.get(f.job.id, [])))
        if res.standby and self.takeover_after_ms >= 0:
            for f in res.standby:
                self._standby_seq += 1
                heapq.heappush(self._standby,
                               (f.due_ms + self.takeover_after_ms, self._standby_seq, f))
            if self._standby_wake is not None:
                self._standby_wake.set()

    # -- standby and takeover ---------------------------------------------

    async def _standby_loop(self) -> None:
        """Take over standby fires their holder has not started in time."""
        assert self._standby_wake is not None
        while not self.stopping:
            now = now_ms()
            if not self._standby or self._standby[0][0] > now:
                wait = 1.0 if not self._standby else (self._standby[0][0] - now) / 1000.0
                self._standby_wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._standby_wake.wait(), wait)
                continue
            due: list[Fire] = []
            while self._standby and self._standby[0][0] <= now and len(due) < MAX_CLAIM_BATCH:
                due.append(heapq.heappop(self._standby)[2])
            await self._take_over(due)

    async def _take_over(self, fires: list[Fire]) -> None:
        assert self._loop is not None
        call = partial(take_over_batch, fires, coordinator=self.coordinator, store=self.store,
                       node_id=self.node_id, lease_seconds=self.settings.lease_seconds,
                       lock_ttl_ms=LOCK_TTL_MS)
        try:
            res = await self._loop.run_in_executor(self._claim_pool, call)
        except Exception:
            log.exception("taking over %d standby fires failed unexpectedly", len(fires))
            return
        if res.coordinator_error:
            self.metrics.coordinator_errors.labels("takeover").inc()
        if not res.dispatch:
            return
        self.metrics.takeovers.inc(len(res.dispatch))
        self._ratelog.warning("takeover", "took over %d fires a replica claimed but had not "
                              "started %d ms after their due time (it died or stalled)",
                              len(res.dispatch), self.takeover_after_ms)
        if res.store_error:
            self.metrics.store_errors.labels("takeover").inc()
            self.writer.insert_later(res.pending_runs, [], takeover=True)
        pending = {r.id for r in res.pending_runs}
        for f in res.dispatch:
            self.dispatcher.add(ActiveRun(
                run_id=f.run_id, job=f.job, scheduled_for=f.scheduled_for, due_ms=f.due_ms,
                attempt=1, origin="schedule", skipped_before=f.skipped_before,
                pending_claim=f.run_id in pending))

    async def _mark_started(self, runs: list[ActiveRun]) -> list[str]:
        """The dispatcher's start marker: mark claimed fires started in the
        coordinator; when it cannot be reached, start them through the run
        row instead (a replica's takeover goes through the same row)."""
        assert self._loop is not None
        keys = [(ar.job.id, to_ms(ar.scheduled_for)) for ar in runs]
        try:
            ok = await self._loop.run_in_executor(
                self._start_pool, self.coordinator.start_fires, keys, LOCK_TTL_MS)
            return [START_GO if x else START_TAKEN for x in ok]
        except CoordinatorUnavailable:
            self.metrics.coordinator_errors.labels("start").inc()
        answers = [START_UNREACHABLE] * len(runs)  # a pending claim has no row to start
        in_db = [i for i, ar in enumerate(runs) if not ar.pending_claim]
        if not in_db:
            return answers
        now = utcnow()
        try:
            changed = await self._loop.run_in_executor(
                self._start_pool, self.store.runs.start_claimed_runs, self.node_id,
                [runs[i].key for i in in_db], now,
                now + timedelta(seconds=self.settings.lease_seconds), self.node_id)
        except StoreUnavailable:
            self.metrics.store_errors.labels("start").inc()
            return answers
        for i in in_db:
            answers[i] = START_GO if runs[i].run_id in changed else START_TAKEN
        return answers

    def _claims_written(self, inserted: set[str], foreign: set[str]) -> None:
        """Claims made while the database was down are in it now: their runs
        take part in lease renewal again; double fires stop here."""
        for run_id in inserted:
            ar = self.dispatcher.active.get(run_id)
            if ar is not None:
                ar.pending_claim = False
        for run_id in foreign:
            self.dispatcher.drop(run_id, "fired twice: another node's run row stands")

    # -- maintenance ------------------------------------------------------

    async def _maintenance(self) -> None:
        s = self.settings
        while not self.stopping:
            try:
                await self.misc(self.store.partitions.run_maintenance, utcnow(),
                                s.partitions_ahead_days, s.history_retention_days)
                delay = MAINTENANCE_INTERVAL
            except StoreUnavailable as exc:
                self.metrics.store_errors.labels("maintenance").inc()
                self._ratelog.error("maintenance", "partition upkeep failed, will retry: %s", exc)
                delay = 60.0
            if await self.sleep(delay):
                return

    # -- stopping ---------------------------------------------------------

    async def _shutdown(self, claimer: asyncio.Task[None], writer: asyncio.Task[None],
                        tasks: list[asyncio.Task[None]]) -> None:
        begun = time.monotonic()
        self.dispatcher.accepting = False
        assert self._wake is not None
        self._wake.set()
        try:
            await asyncio.wait_for(self.beat(self.coordinator.leave, self.node_id), 1.0)
        except Exception as exc:
            log.warning("could not leave the membership (it will expire): %s", exc)
        self._feed_stop.set()
        for t in tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(claimer), 2.0)
        claimer.cancel()
        # Claimed fires (due within the claim lead) still start; attempts under
        # way may finish; runs waiting for a retry are handed back at once.
        drain_until = begun + DRAIN_SECONDS
        while time.monotonic() < drain_until:
            if not any(ar.in_attempt or ar.attempt_started is None
                       for ar in self.dispatcher.active.values()):
                break
            await asyncio.sleep(0.05)
        keys = self.dispatcher.hand_back()
        # Outcomes still waiting in the writer go first: a pending update (a
        # retry's next attempt) carries a lease that would undo the hand-back.
        with contextlib.suppress(Exception):
            await writer
        await self.writer.drain(begun + STOP_BUDGET - 3.5)
        if keys:
            try:
                n = await asyncio.wait_for(
                    self.misc(self.store.runs.renew_leases, self.node_id, keys,
                              utcnow() - timedelta(milliseconds=1)), 3.0)
                log.info("handed back %d runs still in flight (their lease expired now)", n)
            except Exception as exc:
                log.error("could not hand back %d runs (they are recovered when their lease "
                          "expires): %r", len(keys), exc)
        await self.dispatcher.wait_side_tasks(max(0.0, begun + STOP_BUDGET - time.monotonic()))
