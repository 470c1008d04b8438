"""A scheduler node: sync, due, claim, dispatch, recover (DESIGN.md, "The life of one fire").

The node composes its parts and runs them. Each part is handed at
construction the parts below it that it calls (its stage may import them:
``cronman/scheduler/__init__.py``); a part that must tell the node or a
sibling something is handed a small interface (a ``Protocol`` of the
caller's module) instead, and nothing is wired after construction:

- ``Membership`` (``jobs``) joins the cluster and heartbeats; it tells the
  ``JobSync`` of membership changes (``MembershipListener``) and asks the
  node what to publish (``HeartbeatStats``);
- ``JobSync`` keeps the ``JobTable`` (owned jobs and their timer heap) in
  step with the database and the membership; it tells the node what changed
  (``JobEvents``: ``table_changed`` wakes the claimer, ``runs_requested``
  kicks ``RequestedRuns``, ``announced`` goes to the gates or the calendars);
- the ``Claimer`` (``claim``) pops fires due soon and claims them
  (coordinator lock, then the database fence) while the node says so
  (``ClaimSwitch``); winners go to the ``Dispatcher``; fires lost to a
  replica, or whose first owner is in charge, wait on ``Standby`` (handed the
  ``JobTable`` as its ``View``) and are taken over if their holder never
  starts them;
- the ``Pulser`` asks the node what its pulse says (``ProgressReport``),
  reads the peers of ``Membership`` (``Peers``) and tells the node of each
  reading (``PulseReadings``: the standby looks again, a skewed clock steps
  out);
- the ``Dispatcher`` (``dispatch``) starts each run at its due time through
  the targets; its own parts call it back through the interfaces of their
  modules: the due queue (``DueRuns``), the start marks (``MarkedRuns``:
  ``proceed``, ``due``, ``let_go``), the finisher (``RunHolder``: ``forget``),
  the gates (``WaitNotes``); the finisher tells the ``OutcomeMarker``
  (``OutcomeSink``) of each attempt's end;
- the ``ResultWriter`` (``record``) writes run changes in batches and tells
  the node of claims written after an outage (``ClaimsWritten``, passed on to
  the dispatcher, which is made after the writer);
- ``LeaseKeeper`` (``recovery``) renews the leases of held runs, the
  ``Sweeper`` carries on runs whose node stopped, ``RequestedRuns`` takes
  runs the API asked for (and runs an upstream's success made),
  ``PartitionUpkeep`` keeps the daily run partitions: each calls the
  dispatcher and the writer below it, nothing calls them back;
- the dispatcher's ``LimitGate`` holds attempts to their limits (the
  ``LimitBook``'s, read each sync poll) on the cluster's ``LimitCounters``,
  asking the node for the live members (``LiveMembers``) when it counts on
  its fair share; it tells the dispatcher when an attempt may start
  (``LimitPassage``);
- the dispatcher's ``FireGates`` skip fires an exclusion calendar holds (the
  ``CalendarBook``) and hold fires whose upstream jobs are not fresh until
  an upstream's success is heard on the feed.

Threads: the event loop (the thread calling ``run``/``main``) owns the table,
the dispatcher and every delivery; blocking calls go to the pools of
``lifecycle.Pools``; the change feed and the pulses have a thread each
(``progress`` is read on the pulse thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import threading
import time
from functools import partial
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from cronman import eventloop
from cronman.callbacks import TargetRegistry
from cronman.callbacks.http_completion import CallbackCompletion
from cronman.callbacks.worker import WorkerTarget
from cronman.config import Settings
from cronman.coordination import make_limit_counters
from cronman.coordination.base import OVERLOADED_BEHIND_MS, Coordinator
from cronman.coordination.limit_counters import LimitCounters
from cronman.models import Run
from cronman.observability import tracing
from cronman.observability.gc_pauses import GcPauseWatch
from cronman.scheduler.claim.claimer import CLAIM_INTERVAL, CLAIM_LEAD, Claimer
from cronman.scheduler.claim.pulse import PULSE_INTERVAL, Progress, Pulser, StallWatch
from cronman.scheduler.claim.standby import TAKEOVER_AFTER, Standby
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.dispatch.gates import FireGates, route_signal
from cronman.scheduler.dispatch.limit_book import LimitBook
from cronman.scheduler.dispatch.limits import LimitGate
from cronman.scheduler.dispatch.signing_book import SigningKeyBook
from cronman.scheduler.dispatch.start_marks import StartMarks
from cronman.scheduler.jobs.calendar_book import CalendarBook
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.jobs.membership import Membership
from cronman.scheduler.jobs.source import JobReader
from cronman.scheduler.jobs.sync import JobSync
from cronman.scheduler.record.outcome_marks import MARK_TTL_LEASES, OutcomeMarker
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.recovery.leases import LeaseKeeper
from cronman.scheduler.recovery.maintenance import PartitionUpkeep
from cronman.scheduler.recovery.requested import RequestedRuns
from cronman.scheduler.recovery.sweeper import Sweeper
from cronman.scheduler.recovery.work_leases import WorkLeases
from cronman.scheduler.runtime.clock import DatabaseClockProbe, ReferenceClock
from cronman.scheduler.runtime.heap_trim import release_free_memory
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool, Pools
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store.base import RunStore, Store
from cronman.vocabulary import TargetKind

log = logging.getLogger(__name__)

DRAIN_SECONDS = 5.0  # graceful stop: how long in-flight runs may finish
STOP_BUDGET = 9.0  # graceful stop: everything done within this
GIL_SWITCH_INTERVAL = 0.0005  # seconds (Python's default: 0.005)
# Seconds between snapshots of the dispatch for the pulses: as often as they
# go out, a pulse carries one at most that old.
PROGRESS_INTERVAL = PULSE_INTERVAL
# The cyclic GC's thresholds (Python's default: 700, 10, 10; tuned on 3.11,
# whose collector is generational). See ``run``.
GC_THRESHOLDS = (50_000, 10, 10)


class SchedulerNode:
    """One scheduler node. ``run()`` blocks until SIGTERM/SIGINT or ``request_stop()``."""

    def __init__(self, settings: Settings, store: Store, coordinator: Coordinator,
                 targets: TargetRegistry, *, registry: CollectorRegistry | None = REGISTRY,
                 metrics: NodeMetrics | None = None, address: str = "",
                 claim_lead: float = CLAIM_LEAD, claim_interval: float = CLAIM_INTERVAL,
                 sweep_interval: float | None = None, requested_poll: float = 1.5,
                 run_maintenance: bool = True, takeover_after: float = TAKEOVER_AFTER,
                 limit_counters: LimitCounters | None = None) -> None:
        s = settings
        self.settings = settings
        self.node_id = s.node_id
        self.store = store
        self.coordinator = coordinator
        self.targets = targets
        if TargetKind.WORKER not in targets:  # every node hands worker runs to their queue
            targets.register(WorkerTarget(store.work, s.node_id))
        http = targets.get(TargetKind.HTTP)
        if http is not None and not isinstance(http, CallbackCompletion):
            # http targets with "completion": "callback" take a lease in the queues first
            targets.register(CallbackCompletion(http, store.work, node_id=s.node_id,
                                                public_url=s.public_url,
                                                lease_seconds=s.lease_seconds))
        self.metrics = m = metrics or NodeMetrics(registry)
        self.run_maintenance = run_maintenance
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.lifecycle = life = Lifecycle()
        self.pools = pools = Pools()
        self.clock = clock = ReferenceClock(max_skew=s.max_clock_skew)
        lease = s.lease_seconds
        node_id = self.node_id
        self.table = JobTable(node_id, s.replicas)
        traces = tracing.active()  # None unless the process configured tracing
        self.writer = ResultWriter(store.runs, pools.write.executor, m, node_id=node_id,
                                   clock=clock, lease_seconds=lease, claims_written=self,
                                   traces=traces)
        self.outcome_marks = OutcomeMarker(coordinator, node_id,
                                           int(MARK_TTL_LEASES * lease * 1000), m)
        reader = JobReader(self.table, store.jobs, pools.misc)
        self.calendars = CalendarBook(store.calendars, pool=pools.misc, lifecycle=life,
                                      poll_interval=s.sync_poll_interval)
        self.signing_keys = SigningKeyBook(store.signing_keys, targets.signers, pool=pools.misc,
                                           lifecycle=life, poll_interval=s.sync_poll_interval)
        self.gates = FireGates(self.calendars, store.dependencies, reader, clock=clock,
                               pool=pools.misc)
        self.limit_counters = limit_counters or make_limit_counters(s)
        self.limit_book = LimitBook(store.limits, pool=pools.misc, lifecycle=life,
                                    poll_interval=s.sync_poll_interval)
        self.limit_gate = LimitGate(node_id, self.limit_counters, self.limit_book, clock=clock,
                                    members=self, lifecycle=life,
                                    lease_ms=max(2000, int(s.heartbeat_ttl * 1000)),
                                    registry=registry)
        marks = StartMarks(node_id, coordinator, store.runs, lease_seconds=lease, clock=clock,
                           pool=pools.start, metrics=m)
        self.dispatcher = Dispatcher(
            node_id=node_id, targets=targets, writer=self.writer, metrics=m, clock=clock,
            max_in_flight=s.max_in_flight, dispatch_tick_ms=s.dispatch_tick_ms,
            lease_seconds=lease, jobs=self.table,
            start_marker=marks, outcomes=self.outcome_marks, gates=self.gates, traces=traces,
            still_held=marks.still_held, limits=self.limit_gate,
            remote_runs=partial(_in_flight_of, store.runs, pools.misc))
        self.sync = JobSync(self.table, store.jobs, store.feed,
                            poll_interval=s.sync_poll_interval, clock=clock, pool=pools.misc,
                            lifecycle=life, metrics=m, events=self)
        self.membership = Membership(node_id, coordinator, heartbeat_ttl=s.heartbeat_ttl,
                                     address=address, stats=self, clock=clock,
                                     pool=pools.beat, lifecycle=life, metrics=m,
                                     listener=self.sync)
        self.pulser = Pulser(node_id, coordinator, clock=clock, progress=self,
                             peers=self.membership, metrics=m, readings=self)
        self.standby = Standby(node_id, coordinator, store.runs, self.dispatcher, self.writer,
                               self.pulser, view=self.table, lease_seconds=lease, clock=clock,
                               pool=pools.claim, lifecycle=life, metrics=m,
                               takeover_after=takeover_after, claim_lead=claim_lead)
        self._out = False  # stepped out of the cluster: clock skewed
        self.claimer = Claimer(node_id, self.table, coordinator, store.runs, self.dispatcher,
                               self.standby, self.writer, self.pulser, switch=self,
                               lease_seconds=lease, clock=clock, pool=pools.claim,
                               lifecycle=life, metrics=m, claim_lead=claim_lead,
                               claim_interval=claim_interval, traces=traces)
        self.requested = RequestedRuns(node_id, reader, store.runs, self.dispatcher,
                                       self.writer, lease_seconds=lease, poll=requested_poll,
                                       clock=clock, pool=pools.misc, lifecycle=life, metrics=m)
        self._stall = StallWatch()
        self.gc_pauses = GcPauseWatch(m.gc_pauses)
        self._snapshot: tuple[str, bool, int] = (self.table.view_key, False, 0)
        self._load: dict[str, Any] = {"state": "ok", "backlog": 0, "held_back": 0,
                                      "behind_s": 0.0, "saturation": 0.0}
        self.database_clock = DatabaseClockProbe(clock, store.server_time_ms, pools.misc, life)
        self.leases = LeaseKeeper(node_id, store.runs, self.dispatcher, self.writer,
                                  lease_seconds=lease, clock=clock, pool=pools.lease,
                                  lifecycle=life, metrics=m)
        self.sweeper = Sweeper(node_id, reader, store.runs, coordinator, self.dispatcher,
                               self.writer, self.membership, lease_seconds=lease,
                               interval=sweep_interval or max(0.5, min(5.0, lease / 3)),
                               clock=clock, pool=pools.misc, lifecycle=life, metrics=m)
        self.work_leases = WorkLeases(store.work, jobs=reader, dead_letters=self.dispatcher,
                                      clock=clock, pool=pools.misc, lifecycle=life, metrics=m)
        self.upkeep = PartitionUpkeep(store.partitions, days_ahead=s.partitions_ahead_days,
                                      retention_days=s.history_retention_days, clock=clock,
                                      pool=pools.misc, lifecycle=life, metrics=m)

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
        # A fire's objects (its run, job, task, request) are freed by
        # reference counting within milliseconds, but with the default young
        # threshold many are alive at some collection: they are promoted, and
        # the full collections that follow -- over every run a backlog holds,
        # hundreds of ms each, collecting nothing -- stall the loop and cut a
        # saturated node's throughput by a third. The young count is net of
        # frees, so a node whose held runs do not grow hardly collects at all;
        # cycles (rare here) wait for about 50,000 more live objects.
        gc.set_threshold(*GC_THRESHOLDS)
        eventloop.run(self.main(install_signals=True), self.settings.event_loop)

    def request_stop(self) -> None:
        """Ask the node to stop (thread-safe)."""
        self.lifecycle.request_stop()

    @property
    def members(self) -> list[str]:
        """The live membership as this node last saw it (its own id included)."""
        return self.membership.members

    async def main(self, install_signals: bool = False) -> None:
        loop = asyncio.get_running_loop()
        life = self.lifecycle
        life.bind(loop)
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, life.stop)
        tasks: list[asyncio.Task[None]] = []

        def start(name: str, fn: Any) -> None:
            tasks.append(loop.create_task(life.forever(name, fn)))

        pools = self.pools
        self.gc_pauses.start()
        try:
            await pools.beat(self.pulser.pulse_once)  # a first reading of the reference clock
            await self.membership.start()
            # Heartbeat from the moment the node has joined: a first load that
            # takes longer than the TTL must not make it drop out (and back in).
            start("heartbeat", self.membership.heartbeat_loop)
            self.pulser.start(loop)
            start("progress", self._track_progress)
            start("database clock", self.database_clock.run)
            if self.run_maintenance:
                start("maintenance", self.upkeep.run)
            await self.calendars.load()
            await self.signing_keys.load()
            await self.limit_book.load()
            await self.sync.initial_load()
            if life.stopping:
                return
            self.sync.start_feed()
            start("calendars", self.calendars.run)
            start("signing keys", self.signing_keys.run)
            start("limits", self.limit_book.run)
            start("limit gate", self.limit_gate.run)
            start("sync", self.sync.run)
            start("leases", self.leases.run)
            start("sweeper", self.sweeper.run)
            start("requested", self.requested.run)
            start("work leases", self.work_leases.run)
            start("standby", self.standby.run)
            claimer = loop.create_task(life.forever("claimer", self.claimer.run))
            writer = loop.create_task(self.writer.run(life))
            self.metrics.owned_jobs.set(len(self.table.jobs))
            # The job table is long-lived: keep the cyclic GC from walking it
            # again and again (a full collection over 100k records costs
            # hundreds of ms, in the middle of a reconcile or a fire batch).
            # The young generations are collected first: with the node's
            # thresholds they may hold tens of thousands of objects of
            # cycles left by the load, which frozen would never be freed.
            gc.collect(1)
            gc.freeze()
            release_free_memory()
            log.info("scheduler node %s ready: owns %d of %d live jobs (%d members, "
                     "replicas %d)", self.node_id, len(self.table.jobs),
                     len(self.table.jobs) + len(self.table.others), len(self.members),
                     self.settings.replicas)
            self.ready.set()
            await life.wait()
            log.info("scheduler node %s stopping", self.node_id)
            await self._shutdown(claimer, writer, tasks)
        finally:
            self.gc_pauses.stop()
            self.pulser.stop()
            self.sync.stop_feed()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.targets.close()
            with contextlib.suppress(Exception):
                await self.coordinator.aclose()
            with contextlib.suppress(Exception):
                await self.limit_counters.aclose()
            self.limit_counters.close()
            self.pools.shutdown()
            self.outcome_marks.close()
            self.stopped.set()
            log.info("scheduler node %s stopped", self.node_id)

    @property
    def claiming(self) -> bool:
        """Whether this node claims fires now: ready, and its clock within bounds."""
        return self.ready.is_set() and not self.clock.skewed

    async def _track_progress(self) -> None:
        """Keep the snapshot of this node's dispatch that its pulses carry
        (read on the pulse thread: the loop owns the table and the dispatcher)."""
        while not await self.lifecycle.sleep(PROGRESS_INTERVAL):
            now = self.clock.now_ms()
            due = [d for d in (self.dispatcher.oldest_unstarted_due(),
                               self.claimer.claiming_due, self.table.oldest_pending_due())
                   if d is not None]
            self._snapshot = (self.table.view_key, self.claiming and self.sync.settled,
                              min([now, *due]) - 1 if due else now - 1)
            self._measure_load(now, min(due) if due else None)
            self.gc_pauses.flush()

    def _measure_load(self, now_ms: int, oldest_due_ms: int | None) -> None:
        """The dispatch's load, for the gauges, the heartbeat and ``/readyz``."""
        d = self.dispatcher
        behind_s = max(0, now_ms - oldest_due_ms) / 1000.0 if oldest_due_ms is not None else 0.0
        saturation = d.running / d.max_in_flight
        held_back = self.table.held
        self._load = {"state": "overloaded" if behind_s * 1000 >= OVERLOADED_BEHIND_MS else "ok",
                      "backlog": len(d.waiting), "held_back": held_back,
                      "behind_s": round(behind_s, 3), "saturation": round(saturation, 3)}
        m = self.metrics
        m.backlog.set(len(d.waiting))
        m.held_back.set(held_back)
        m.backlog_seconds.set(behind_s)
        m.saturation.set(saturation)

    def load(self) -> dict[str, Any]:
        """How far behind this node's dispatch is: ``state`` ok or overloaded,
        fires waiting for a slot, fires held back unclaimed (``Claimer.behind``),
        seconds the oldest due fire has waited, and attempts in flight over
        the most it runs at once (thread-safe)."""
        return self._load

    # -- what the parts tell the node (the interfaces of the docstring) ------

    def progress(self) -> Progress:
        """What this node's pulse says of it (``ProgressReport``, on the pulse
        thread): the loop's last snapshot, and whether its dispatch still moves."""
        view, ready, through = self._snapshot
        d = self.dispatcher
        stalled = self._stall.stalled(
            through, self.clock.now_ms(), starts=d.starts,
            saturated=d.running >= d.max_in_flight,
            held=len(d.active) + self.claimer.claiming_count)
        return Progress(view=view, ready=ready, through_ms=through, stalled=stalled)

    def readiness(self) -> tuple[bool, dict[str, str]]:
        """Whether this node does its share now, and each check's answer:
        its jobs loaded, its clock within bounds of the cluster's, its run
        writes and claims going through (thread-safe: read by the metrics server)."""
        clock = self.clock
        checks = {
            "loaded": "ok" if self.ready.is_set() else "loading jobs",
            "clock": "ok" if not clock.skewed else
                     f"off the cluster's clock by {clock.skew_seconds:+.3f} s: not claiming",
            "run_writes": self.writer.health() or self.claimer.health() or "ok",
        }
        return all(v == "ok" for v in checks.values()), checks

    def pulse_read(self) -> None:
        """After each pulse (``PulseReadings``): watched fires are looked at
        again, and a node whose clock went off (or came back) steps out of (or
        into) the cluster."""
        self.standby.wake()
        skewed = self.clock.skewed
        self.metrics.clock_skewed.set(int(skewed))
        if skewed != self._out:
            self._out = skewed
            task = asyncio.get_running_loop().create_task(
                self.membership.step_out() if skewed else self.membership.step_in())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def heartbeat_stats(self) -> dict[str, Any]:
        """What the node publishes with each heartbeat (``HeartbeatStats``)."""
        return {"owned_jobs": len(self.table.jobs),
                "fires_last_minute": self.dispatcher.fires_last_minute.value(),
                "lock_wins": self.claimer.lock_wins,
                "lock_losses": self.claimer.lock_losses,
                "in_flight": self.dispatcher.running,
                "backlog": self._load["backlog"],
                "held_back": self._load["held_back"],
                "behind_ms": int(self._load["behind_s"] * 1000),
                "saturation_pct": int(self._load["saturation"] * 100)}

    def claims_written(self, inserted: set[str], foreign: set[str]) -> None:
        """``ClaimsWritten``: passed on to the dispatcher (made after the writer)."""
        self.dispatcher.claims_written(inserted, foreign)

    def table_changed(self) -> None:
        """``JobEvents``: the claimer looks at the table's head again."""
        self.claimer.wake()

    def runs_requested(self) -> None:
        """``JobEvents``: requested runs are looked for now."""
        self.requested.kick()

    def announced(self, item: str) -> None:
        """``JobEvents``: an upstream's success wakes its waiters, a calendar
        change has the calendars read again."""
        route_signal(item, self.gates, self.calendars)

    # -- stopping ---------------------------------------------------------

    async def _shutdown(self, claimer: asyncio.Task[None], writer: asyncio.Task[None],
                        tasks: list[asyncio.Task[None]]) -> None:
        begun = time.monotonic()
        self.dispatcher.stop_accepting()
        self.claimer.wake()
        await self.membership.leave(1.0)
        # Not joined here: the thread may be in a wait of half a second, and
        # claimed fires still start on this loop (joined in ``main``'s cleanup).
        self.sync.stop_feed(wait=False)
        for t in tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(claimer), 2.0)
        claimer.cancel()
        # Claimed fires (due within the claim lead) still start; attempts under
        # way may finish; runs waiting for a retry are handed back at once.
        drain_until = begun + DRAIN_SECONDS
        while time.monotonic() < drain_until:
            if not any(ar.in_attempt or (ar.attempt_started_ms is None and not ar.waiting)
                       for ar in self.dispatcher.active.values()):
                break
            await asyncio.sleep(0.05)
        keys = self.dispatcher.hand_back()
        # Outcomes still waiting in the writer go first: a pending update (a
        # retry's next attempt) carries a lease that would undo the hand-back.
        with contextlib.suppress(Exception):
            await writer
        await self.writer.drain(begun + STOP_BUDGET - 3.5)
        await self.leases.hand_back(keys, 3.0)
        await self.dispatcher.wait_side_tasks(max(0.0, begun + STOP_BUDGET - time.monotonic()))


async def _in_flight_of(runs: RunStore, pool: Pool, job_id: str) -> list[Run]:
    """The runs of ``job_id`` in flight, read on ``pool`` (the overlap buffers'
    look at runs held by other nodes)."""
    found = await pool(runs.in_flight_runs, [job_id])
    return found.get(job_id, [])
