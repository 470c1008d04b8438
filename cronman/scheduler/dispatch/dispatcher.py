"""The dispatcher: runs claimed fires on their targets, on the event loop.

A run is an ``ActiveRun`` from the moment it is claimed (or taken over) until
it reaches a final status or is handed back. It is started exactly at its due
time (``duequeue``: one loop timer for all runs, those due taken highest
priority first and a bounded number per loop turn); at most
``max_in_flight`` attempts run at once, and when that many are running the
next ones wait in a queue, higher priority first and namespaces taking
turns within a priority (``waitqueue``). A slow or hung target only holds its
slot, never the timer: each attempt is bounded by the target's own timeout
plus a margin.

How an attempt ends -- a final status, or a retry after the policy's backoff
-- is recorded by the ``RunFinisher`` (``finisher``); a short run costs its
claim and one final write (``running`` is written by the lease renewal, only
for runs that last).

Right before a fire's first attempt it passes its gates (``gates``): a fire an
exclusion calendar holds is recorded ``skipped``; one whose upstream jobs
are not fresh waits for them (holding its lease, marked started) or is
skipped when its wait runs out. A fire of a job with an overlap buffer
(``buffer_one``, ``buffer_all``) then waits in it while a run of the job is in
flight (``buffers``).

An attempt held to limits (per destination, the namespaces' quotas) starts
once the cluster's counters grant it (``limits``), waiting meanwhile.

An operator's cancel of a held run, read at the lease renewal, stops its
attempt or ends it (``cancels``).

A fire claimed under a coordinator lock is marked started in the coordinator
right before its first attempt (``start_marks``, batched per loop turn); a
fire found taken over is dropped here without a write.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

from cronman.callbacks import TargetRegistry
from cronman.callbacks.base import Answered, Delivery, Outcome
from cronman.models import Job, Run, RunUpdate
from cronman.observability import logs
from cronman.observability.tracing import RunTraces
from cronman.scheduler.dispatch import admission
from cronman.scheduler.dispatch.admission import HeldJobs
from cronman.scheduler.dispatch.buffers import Buffers, RemoteLookup, buffered, buffered_error
from cronman.scheduler.dispatch.cancels import Cancels, cancelled
from cronman.scheduler.dispatch.dead_letters import DeadLetters
from cronman.scheduler.dispatch.deadlines import timeout_of
from cronman.scheduler.dispatch.duequeue import DueQueue
from cronman.scheduler.dispatch.ended import EndedRuns
from cronman.scheduler.dispatch.finisher import OutcomeSink, RunFinisher
from cronman.scheduler.dispatch.gates import GateKeeper, GateVerdict
from cronman.scheduler.dispatch.limits import LimitGate
from cronman.scheduler.dispatch.start_marks import StartMarkBatcher, StartMarker, StillHeld
from cronman.scheduler.dispatch.waitqueue import FairQueue
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import MinuteCounter, NodeMetrics
from cronman.timeutil import from_ms
from cronman.vocabulary import (
    BUFFERED_POLICIES,
    GATED_ORIGINS,
    MANUAL_ORIGINS,
    ConcurrencyPolicy,
    HttpCompletion,
    RunStatus,
    TargetKind,
)

log = logging.getLogger(__name__)

# Added to a target's own timeout before the dispatcher gives up on an attempt.
TIMEOUT_MARGIN = 5.0
WATCHDOG_INTERVAL = 0.5
# Plain strings: the origin of a run is one, and this is looked up per fire.
_MANUAL = frozenset(o.value for o in MANUAL_ORIGINS)
_BUFFERED = frozenset(p.value for p in BUFFERED_POLICIES)


class Dispatcher:
    """Starts attempts at their due time, bounded, and records their outcome."""

    def __init__(self, *, node_id: str, targets: TargetRegistry, writer: ResultWriter,
                 metrics: NodeMetrics, clock: ReferenceClock, max_in_flight: int,
                 lease_seconds: float, dispatch_tick_ms: int = 0,
                 jobs: HeldJobs, start_marker: StartMarker | None = None,
                 outcomes: OutcomeSink | None = None,
                 gates: GateKeeper | None = None, traces: RunTraces | None = None,
                 still_held: StillHeld | None = None,
                 limits: LimitGate | None = None,
                 remote_runs: RemoteLookup | None = None) -> None:
        self.node_id = node_id
        self._traces = traces  # None: tracing is off (the one check per fire)
        # Asked before each retry made here: a sweeper may have taken the run
        # while this node was slow (and sends the retry itself).
        self._still_held = still_held
        self.limits = limits
        self.clock = clock
        self.gates = gates
        self.targets = targets
        self.writer = writer
        self.metrics = metrics
        # Never more attempts than the targets' connection pools hold: an
        # attempt waiting for a pooled connection would burn its timeout (and
        # then retry, adding load) where waiting in our queue costs nothing and
        # keeps priorities.
        pools = targets.pool_limit()
        self.max_in_flight = max(1, max_in_flight if pools is None else min(max_in_flight, pools))
        self.lease_seconds = lease_seconds
        self.jobs = jobs
        self.active: dict[str, ActiveRun] = {}
        self.ended = EndedRuns()  # asked by the sweeper (``ended``)
        self.by_job: dict[str, dict[str, ActiveRun]] = {}
        self.running = 0
        self.starts = 0  # attempts started so far: the node's progress
        self.waiting = FairQueue()
        # Runs not started yet, by due time (lazily cleaned): how far dispatch has come.
        self._unstarted: list[tuple[int, int, ActiveRun]] = []
        self._seq = 0
        self._due_runs = DueQueue(clock, self, tick_ms=dispatch_tick_ms)
        self.fires_last_minute = MinuteCounter()
        self._lateness = metrics.lateness
        metrics.in_flight.set_function(lambda: self.running)
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self.dead_letters = DeadLetters(targets, metrics, self._side_tasks)
        self.finisher = RunFinisher(
            node_id=node_id, writer=writer, metrics=metrics, clock=clock,
            lease_seconds=lease_seconds, dead_letters=self.dead_letters, outcomes=outcomes,
            holder=self)
        self._finish = self.finisher.finish
        self.start_marks = None if start_marker is None else StartMarkBatcher(
            start_marker, node_id=node_id, writer=writer, metrics=metrics, clock=clock,
            side_tasks=self._side_tasks, runs=self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._accepting = True
        # Overlap buffers (``buffers``): ``remote_runs`` reads a job's runs in
        # flight (on other nodes) from the store.
        self.buffers = Buffers(self, clock, remote_runs)
        # An operator's cancels, read at the lease renewal (``cancels``).
        self.cancels = Cancels(self, self._side_tasks)

    # -- entry points -----------------------------------------------------

    def add(self, ar: ActiveRun, at_ms: int | None = None,
            claimed: tuple[int, int, int] | None = None) -> None:
        """Hold ``ar`` and start its next attempt at ``at_ms`` (its due time by
        default); ``claimed``: (start ns, end ns, batch size) of the store call
        that took it, for its trace's claim span."""
        if ar.run_id in self.active:
            return
        self.writer.reclaim(ar.run_id)
        self.active[ar.run_id] = ar
        if self._traces is not None and ar.trace is None:
            ar.trace = self._traces.begin(
                run_id=ar.run_id, job_id=ar.job.id, job_name=ar.job.name,
                namespace=ar.job.namespace, origin=ar.origin, scheduled_for=ar.scheduled_for,
                claimed=claimed, upstream=_run_ids(ar.gate, "upstream"),
                attempt=ar.attempt)
        if ar.attempt_started_ms is None:
            self._seq += 1
            heapq.heappush(self._unstarted, (ar.due_ms, self._seq, ar))
        self.by_job.setdefault(ar.job.id, {})[ar.run_id] = ar
        self._schedule(ar, ar.due_ms if at_ms is None else at_ms)

    def oldest_unstarted_due(self) -> int | None:
        """The due time (ms) of the earliest held run whose first attempt here
        has not started, or None."""
        heap = self._unstarted
        # A run waiting for its upstream jobs has been come through: it is
        # marked started, and may wait for hours.
        while heap and (heap[0][2].done or heap[0][2].attempt_started_ms is not None
                        or heap[0][2].waiting):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def holds(self, run_id: str) -> bool:
        return run_id in self.active

    def claims_written(self, inserted: set[str], foreign: set[str]) -> None:
        """Claims made while the database was down are in it now (the result
        writer tells): their runs take part in lease renewal again; a run
        whose row another node had written already (a double fire) stops here."""
        for run_id in inserted:
            ar = self.active.get(run_id)
            if ar is not None:
                ar.pending_claim = False
        for run_id in foreign:
            self.drop(run_id, "fired twice: another node's run row stands")

    def _schedule(self, ar: ActiveRun, at_ms: int) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._due_runs.at(ar, at_ms) and ar.mark_start and self.start_marks is not None:
            self.start_marks.expect(ar)

    def due(self, ar: ActiveRun) -> None:
        """``ar``'s time has come (``DueRuns``: the due queue, the start marks):
        pass its checks and gates, ask for its start mark, or start it."""
        try:
            self._due_inner(ar)
        except Exception as exc:  # a bug must not leave a run without a status
            log.exception("dispatching run %s failed unexpectedly", ar.run_id)
            self._release(ar)
            self._stop_local(ar)
            self._finish(ar, "failed", error=f"internal error in the scheduler: {exc!r}")

    def _due_inner(self, ar: ActiveRun) -> None:
        ar.handle = None
        if ar.done:
            return
        if ((ar.attempt_started_ms is not None or ar.attempt > 1)
                and self._still_held is not None and ar.held_checked < ar.attempt):
            self._check_held(ar, self._still_held)
            return
        if ar.attempt_started_ms is None:
            # Only a step of the clock (or of its offset) backwards makes this true.
            if ar.due_ms > self.clock.now_ms():
                self._due_runs.at(ar, ar.due_ms)
                return
        if ar.check_job:
            if ar.started_at is None:
                if not self._still_wanted(ar):
                    self._queue_mark(ar)  # handled (skipped): no replica takes it over
                    return
            elif self.jobs.is_deleted(ar.job.id):
                self._finish(ar, "failed", error=f"job deleted: attempt {ar.attempt} not made")
                return
        if self.gates is not None:
            skip = self.gates.excluded(ar)
            if skip is not None:
                ar.gate = skip.gate
                self._finish(ar, RunStatus.SKIPPED, error=skip.error)
                self._queue_mark(ar)  # handled (skipped): no replica takes it over
                return
        if ar.attempt_started_ms is None and ar.started_at is None and ar.origin in GATED_ORIGINS:
            if not self._concurrency_allows(ar):
                self._queue_mark(ar)
                return
        marks = self.start_marks
        if ar.mark_start and marks is not None:
            marks.add(ar)  # ``proceed`` follows unless a replica took it over
            return
        self.proceed(ar)

    def _check_held(self, ar: ActiveRun, still_held: StillHeld) -> None:
        """Before a retry: send it only while this node still holds the run."""
        loop = self._loop or asyncio.get_running_loop()

        async def check() -> None:
            held = await still_held(ar)
            ar.task = None
            if ar.done:
                return
            if not held:
                self.drop(ar.run_id, f"taken over by another node before its attempt "
                                     f"{ar.attempt} (this node was slow to renew its lease)")
                return
            ar.held_checked = ar.attempt
            self.due(ar)

        ar.task = loop.create_task(check())

    def _queue_mark(self, ar: ActiveRun) -> None:
        """Mark a fire handled here (skipped) started: no replica takes it over."""
        if self.start_marks is not None:
            self.start_marks.add(ar)

    def _go(self, ar: ActiveRun) -> None:
        if self.limits is not None and self.limits.hold(ar, self):
            return  # ``limit_passed`` follows, or ``limit_skipped``
        if self.running >= self.max_in_flight:
            self.waiting.push(ar.job.priority, ar.due_ms, ar, ar.job.namespace)
            return
        self._start(ar)

    def proceed(self, ar: ActiveRun) -> None:
        """Start the run, or first wait for its upstream jobs (``depends_on``);
        the start marks call it once a run is marked started (``MarkedRuns``)."""
        gates = self.gates
        if gates is not None and gates.must_wait(ar):
            ar.waiting = True
            loop = self._loop or asyncio.get_running_loop()
            ar.task = loop.create_task(self._wait_upstream(ar, gates))
            return
        self._go_unless_buffered(ar)

    async def _wait_upstream(self, ar: ActiveRun, gates: GateKeeper) -> None:
        try:
            verdict = await gates.wait(ar, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave a run without a status
            log.exception("checking the upstream jobs of run %s failed unexpectedly",
                          ar.run_id)
            verdict = GateVerdict(False, f"internal error in the scheduler: {exc!r}")
        ar.task = None
        ar.waiting = False
        if ar.done:
            return
        ar.gate = verdict.gate or ar.gate
        if ar.trace is not None and verdict.gate:
            ar.trace.link_upstream(_run_ids(verdict.gate, "depends_on"))
        if not verdict.go:
            self._finish(ar, RunStatus.SKIPPED, error=verdict.error)
            return
        ar.gate_passed = True
        if ar.check_job and not self._still_wanted(ar):  # it may have waited long
            return
        self._go_unless_buffered(ar)

    # -- overlap buffers (``BufferHost``) ---------------------------------------

    def _go_unless_buffered(self, ar: ActiveRun) -> None:
        if buffered(ar) and not self.buffers.admit(ar, [
                r for r in ar.remote_in_flight
                if r.node_id != self.node_id and r.id not in self.active]):
            return
        self._go(ar)

    def in_flight_here(self, job_id: str) -> list[ActiveRun]:
        """The job's runs held here in flight: started, or let through its buffer."""
        return [r for r in self.by_job.get(job_id, {}).values()
                if not r.done and not r.waiting and (r.started_at is not None
                                                     or r.buffer_passed)]

    def note_buffered(self, ar: ActiveRun) -> None:
        self.writer.update(RunUpdate(id=ar.run_id, scheduled_for=ar.scheduled_for,
                                     status=ar.status, error=buffered_error(ar), gate=ar.gate))

    def skip_buffered(self, ar: ActiveRun, error: str) -> None:
        self._finish(ar, RunStatus.SKIPPED, error=error)

    def release(self, ar: ActiveRun) -> None:
        self.writer.update(RunUpdate(id=ar.run_id, scheduled_for=ar.scheduled_for,
                                     status=ar.status, error=None, gate=ar.gate))
        if ar.check_job and not self._still_wanted(ar):  # it may have waited long
            return
        self._go(ar)

    def limit_passed(self, ar: ActiveRun) -> None:
        """Its limits granted the attempt (``LimitPassage``): start it; one that
        waited has its row say how long (no longer waiting: the API counts
        the fires waiting on a limit from the rows)."""
        if ar.done:
            return
        held = (ar.gate or {}).get("limit")
        if isinstance(held, dict) and "waited_ms" in held:
            self.writer.update(RunUpdate(id=ar.run_id, scheduled_for=ar.scheduled_for,
                                         status=ar.status, gate=ar.gate))
        if ar.check_job and ar.started_at is None and not self._still_wanted(ar):
            return  # it may have waited long
        self._go(ar)

    def limit_skipped(self, ar: ActiveRun, error: str) -> None:
        """It waited on a limit past its grace (``LimitPassage``)."""
        if not ar.done:
            self._finish(ar, RunStatus.SKIPPED, error=error)

    def note_waiting(self, ar: ActiveRun, gate: dict[str, Any]) -> None:
        """The run waits for upstream jobs or on a limit (``WaitNotes``,
        ``LimitPassage``): say so in its row (the API shows why)."""
        ar.gate = gate
        self.writer.update(RunUpdate(id=ar.run_id, scheduled_for=ar.scheduled_for,
                                     status=ar.status, gate=gate))

    def _still_wanted(self, ar: ActiveRun) -> bool:
        verdict = admission.still_wanted(ar, self.jobs)
        if not verdict.go:
            self._finish(ar, RunStatus.SKIPPED, error=verdict.error)
            return False
        if verdict.job is not None:
            ar.job = verdict.job
        return True

    def _concurrency_allows(self, ar: ActiveRun) -> bool:
        if ar.job.concurrency == ConcurrencyPolicy.ALLOW:
            return True
        local = [r for r in self.by_job.get(ar.job.id, {}).values()
                 if r is not ar and not r.done and r.started_at is not None]
        remote = [r for r in ar.remote_in_flight
                  if r.node_id != self.node_id and r.id not in self.active]
        verdict = admission.concurrency(ar, local, remote)
        if not verdict.go:
            self._finish(ar, RunStatus.SKIPPED, error=verdict.error)
            return False
        reason = f"replaced by run {ar.run_id}"
        for prev in verdict.replace:
            self._stop_local(prev)
            self._finish(prev, RunStatus.FAILED, error=reason)
        now = self.clock.now()
        if verdict.replace_remote and _with_a_queue(ar.job.target):
            self._cancel_queued(verdict.replace_remote, reason)
            return True
        for r in verdict.replace_remote:
            # The row becomes ours (as a sweeper's): the replaced run's node
            # can no longer overwrite this record with its own outcome.
            self.writer.update(RunUpdate(id=r.id, scheduled_for=r.scheduled_for,
                                         status=RunStatus.FAILED.value, error=reason,
                                         finished_at=now, extra={"node_id": self.node_id},
                                         counted_job=ar.job.id if ar.job.counts_runs
                                         else None))
            self.metrics.runs_finished.labels(RunStatus.FAILED.value).inc()
        return True

    def _cancel_queued(self, runs: tuple[Run, ...], reason: str) -> None:
        """Runs of a worker target are their queue's: ask it to cancel them
        (a held one stops at its worker's next heartbeat)."""
        target = self.targets.get(TargetKind.WORKER)
        cancel = getattr(target, "cancel", None)
        if cancel is None:
            return
        done = cancel([r.id for r in runs], reason)
        done.add_done_callback(_log_cancel_failure)

    # -- attempts ---------------------------------------------------------

    def _start(self, ar: ActiveRun) -> None:
        self.running += 1
        self.starts += 1
        ar.in_attempt = True
        ar.status = "running"
        now_ms = self.clock.now_ms()
        ar.attempt_started_ms = now_ms
        if ar.started_at is None:
            ar.started_at = from_ms(now_ms)
            ar.lateness_ms = now_ms - ar.due_ms
            if ar.origin in _MANUAL:  # not the schedule's lateness: counted as a fire only
                self.metrics.namespaces.fired(ar.job.namespace, None)
            else:
                self._lateness.observe(max(0, ar.lateness_ms) / 1000.0)
                self.metrics.namespaces.fired(ar.job.namespace, ar.lateness_ms / 1000.0)
            self.metrics.fires.labels(ar.origin).inc()
            self.fires_last_minute.add()
        loop = self._loop or asyncio.get_running_loop()
        ar.deadline = loop.time() + timeout_of(ar.job.target) + TIMEOUT_MARGIN
        ar.timed_out = False
        # Started here, not in the task's first step: the target may send at
        # once (an idle keep-alive connection) instead of after every other
        # callback this loop turn has queued.
        job = ar.job
        trace = ar.trace
        carrier = () if trace is None else trace.attempt_started(
            ar.attempt, str(job.target.get("kind", "")), ar.lateness_ms)
        try:
            answer = self.targets.route(Delivery(
                job_id=job.id, run_id=ar.run_id, scheduled_for=ar.scheduled_for,
                attempt=ar.attempt, target=job.target, namespace=job.namespace,
                job_name=job.name, priority=job.priority, retry=job.retry,
                delivery_mode=job.delivery, due_ms=ar.due_ms, trace=carrier))
        except Exception as exc:  # a target must not raise; if it does, the run still ends
            answer = Answered(_target_raised(ar, exc))
        ar.task = loop.create_task(self._attempt(ar, answer))
        if self._watchdog is None:
            self._watchdog = loop.call_later(WATCHDOG_INTERVAL, self._watch)

    async def _attempt(self, ar: ActiveRun, answer: Awaitable[Outcome]) -> None:
        # This task's log records carry the run (it runs in a context of its own).
        job = ar.job
        trace = ar.trace
        if trace is None:
            logs.bind_run(self.node_id, job.id, ar.run_id, job.namespace)
        else:
            logs.bind_run(self.node_id, job.id, ar.run_id, job.namespace, *trace.log_ids())
        try:
            # The target's answer is awaited here directly (no frame in
            # between: it is resumed twice per fire).
            outcome = await answer
        except asyncio.CancelledError:
            if not ar.timed_out:
                self._release(ar)
                raise
            outcome = Outcome(ok=False, error=f"target gave no answer within "
                                              f"{timeout_of(job.target) + TIMEOUT_MARGIN:g} s")
        except Exception as exc:  # a target must not raise; if it does, the run still ends
            outcome = _target_raised(ar, exc)
        self._release(ar)
        if ar.done:
            if trace is not None:
                trace.attempt_ended(ar.status, outcome.error)
            return
        if ar.cancel_error is not None and not outcome.ok:
            outcome = cancelled(outcome, ar.cancel_error)
        try:
            at_ms = self.finisher.after_attempt(ar, outcome, accepting=self._accepting)
            if at_ms is not None:
                self._schedule(ar, at_ms)
        except Exception as exc:  # a bug must not leave a run without a status
            log.exception("recording the outcome of run %s failed unexpectedly", ar.run_id)
            self._finish(ar, "failed", error=f"internal error in the scheduler: {exc!r}")
        if trace is not None:
            trace.attempt_ended(ar.status, outcome.error)

    def _watch(self) -> None:
        """Cancel attempts past their deadline (a target that ignores its own
        timeout). One timer for all attempts: cheaper than a timeout each."""
        self._watchdog = None
        loop = self._loop or asyncio.get_running_loop()
        now = loop.time()
        for ar in list(self.active.values()):
            if ar.in_attempt and ar.task is not None and now > ar.deadline:
                ar.timed_out = True
                ar.task.cancel()
        if self.running:
            self._watchdog = loop.call_later(WATCHDOG_INTERVAL, self._watch)

    def _release(self, ar: ActiveRun) -> None:
        if not ar.in_attempt:
            return
        ar.in_attempt = False
        ar.task = None
        ar.timed_out = False
        self.running -= 1
        if ar.limits is not None and self.limits is not None:
            self.limits.release(ar)
        while self.waiting and self.running < self.max_in_flight:
            nxt = self.waiting.pop()
            if not nxt.done:
                self._start(nxt)

    def forget(self, ar: ActiveRun) -> None:
        """Stop holding ``ar`` (``RunHolder``: the finisher ended it)."""
        if self.active.pop(ar.run_id, None) is not None:
            self.ended.add(ar.run_id)
        if ar.trace is not None:
            ar.trace.ended(ar.status)
        runs = self.by_job.get(ar.job.id)
        if runs is not None:
            runs.pop(ar.run_id, None)
            if not runs:
                del self.by_job[ar.job.id]
        if ar.job.concurrency in _BUFFERED:
            self.buffers.ended(ar)

    def _stop_local(self, ar: ActiveRun) -> None:
        if ar.handle is not None:
            ar.handle.cancel()
            ar.handle = None
        if ar.task is not None:
            ar.task.cancel()
            if ar.trace is not None and ar.in_attempt:
                ar.trace.attempt_ended("stopped", None)
            self._release(ar)  # at once: a task cancelled before it ran has no finally

    # -- outside decisions ------------------------------------------------

    def stop_accepting(self) -> None:
        """The node is stopping: a failed attempt's retry is left to whoever
        takes the run over."""
        self._accepting = False

    def end(self, ar: ActiveRun, status: str, error: str) -> None:
        """End a held run now (``lost``, ``failed``, ``skipped``) with ``error``."""
        self._stop_local(ar)
        self._finish(ar, status, error=error)

    def drop(self, run_id: str, reason: str) -> None:
        """Stop a run another party now owns (replaced elsewhere, taken over):
        no more writes for it from this node."""
        ar = self.active.get(run_id)
        if ar is None:
            return
        log.warning("run %s of job %s stopped here: %s", run_id, ar.job.id, reason)
        self.let_go(ar)

    def let_go(self, ar: ActiveRun) -> None:
        """Stop holding ``ar`` without a write (another party has it now;
        ``MarkedRuns``: a replica took it over)."""
        ar.done = True
        self._stop_local(ar)
        self._untrace(ar, "taken over")
        self.forget(ar)

    @staticmethod
    def _untrace(ar: ActiveRun, reason: str) -> None:
        if ar.trace is not None:
            ar.trace.let_go(reason)
            ar.trace = None

    def hand_back(self) -> list[tuple[str, datetime]]:
        """Stop everything still held (graceful stop); returns the keys of runs
        whose lease must be expired so that a sweeper takes them over."""
        keys = []
        self.waiting.drain()
        if self.limits is not None:
            self.limits.stop()
        self.buffers.stop()
        self.targets.hand_back()  # work that outlives the node (containers) stays
        for ar in list(self.active.values()):
            ar.done = True
        for ar in list(self.active.values()):
            ar.done = True
            self._stop_local(ar)
            self._untrace(ar, "handed back")
            self.forget(ar)
            if not ar.pending_claim:
                keys.append(ar.key)
        self._due_runs.clear()
        return keys

    def dead_letter(self, job: Job, run: Run) -> None:
        """Send the run record to the job's dead-letter target (in the background)."""
        self.dead_letters.send(job, run)

    async def wait_side_tasks(self, timeout: float) -> None:
        if self._side_tasks:
            await asyncio.wait(list(self._side_tasks), timeout=timeout)

    # -- for the lease renewal -------------------------------------------

    def lease_keys(self) -> list[tuple[str, datetime]]:
        return [ar.key for ar in self.active.values() if not ar.pending_claim]

    def running_updates(self, lease_until: datetime) -> list[RunUpdate]:
        """``running`` rows for attempts under way whose status is not yet written."""
        out = []
        for ar in self.active.values():
            if ar.in_attempt and not ar.running_written and not ar.pending_claim:
                ar.running_written = True
                out.append(RunUpdate(id=ar.run_id, scheduled_for=ar.scheduled_for,
                                     status="running", attempt=ar.attempt,
                                     started_at=ar.started_at, lateness_ms=ar.lateness_ms,
                                     lease_expires_at=lease_until))
        return out


def _run_ids(gate: dict[str, Any] | None, key: str) -> list[str]:
    """The run ids a gate's entries name under ``key`` (``upstream``, ``depends_on``)."""
    entries = (gate or {}).get(key) or []
    return [str(e["run_id"]) for e in entries if isinstance(e, dict) and e.get("run_id")]


def _with_a_queue(target: dict[str, Any]) -> bool:
    """Whether the target's runs are their work queue's once handed off (a
    worker target's, an http target's completed by callback)."""
    kind = target.get("kind")
    return kind == TargetKind.WORKER or (
        kind == TargetKind.HTTP and target.get("completion") == HttpCompletion.CALLBACK)


def _log_cancel_failure(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("cancelling replaced worker runs failed: %s", done.exception())


def _target_raised(ar: ActiveRun, exc: Exception) -> Outcome:
    """The failed outcome of an attempt whose target raised (a bug in it),
    whether while starting or while awaited."""
    log.exception("target %s raised for run %s", ar.job.target.get("kind"), ar.run_id,
                  exc_info=exc)
    return Outcome(ok=False, error=f"target error: {exc!r}")
