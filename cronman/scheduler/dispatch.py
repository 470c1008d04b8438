"""The dispatcher: runs claimed fires on their targets, on the event loop.

A run is an ``ActiveRun`` from the moment it is claimed (or taken over) until
it reaches a final status or is handed back. It is started exactly at its due
time (``loop.call_at``); at most ``max_in_flight`` attempts run at once, and
when that many are running the next ones wait in a queue, higher priority
first. A slow or hung target only holds its slot, never the timer: each
attempt is bounded by the target's own timeout plus a margin.

A failed attempt is retried after the policy's backoff (``retrying``, with
``next_attempt_at``; the run holds no slot meanwhile); the last failure, or a
non-retryable one, ends the run ``failed`` and fires its dead-letter target.
Every status change goes to the result writer; a short run costs its claim
and one final write (``running`` is written by the lease renewal, only for
runs that last). The end of each attempt (a final status, or ``retrying``)
also goes to ``on_outcome`` at once: the node's outcome marks, which spare a
run whose node dies before the writer's flush from being sent again.

A fire claimed under a coordinator lock is marked started in the coordinator
right before its first attempt (``start_marker``, batched per loop turn):
a replica watching the fire takes it over when it is not started shortly
after its due time (its holder died), and the mark is what keeps the two from
both sending it. A fire found taken over is dropped here without a write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronman.callbacks.base import Delivery, Outcome
from cronman.models import Job, Run, RunUpdate
from cronman.scheduler import policies
from cronman.scheduler.metrics import MinuteCounter, NodeMetrics
from cronman.scheduler.ratelog import RateLimitedLog
from cronman.scheduler.timers import PriorityQueue
from cronman.scheduler.writer import ResultWriter
from cronman.timeutil import to_ms, utcnow

log = logging.getLogger(__name__)

# Added to a target's own timeout before the dispatcher gives up on an attempt.
TIMEOUT_MARGIN = 5.0
WATCHDOG_INTERVAL = 0.5
# Timers aim this far past a due time (the loop's timers may run a hair early).
SCHEDULE_MARGIN_MS = 0.3
DEFAULT_TARGET_TIMEOUT = 10.0
NO_AGENT_ERROR = ("container targets need a worker agent (cronman agent); "
                  "none is available to this scheduler")

# What the node answers when asked about a job right before a dispatch.
JobLookup = Callable[[str], "tuple[Job | None, bool]"]

# Answers of a start marker, one per run.
START_GO = "go"  # marked: send it
START_TAKEN = "taken"  # a replica took the fire over: drop it
START_UNREACHABLE = "unreachable"  # neither coordinator nor database could say
StartMarker = Callable[[list["ActiveRun"]], Awaitable[list[str]]]
# Told of each update that ends an attempt (outcome_marks.OutcomeMarker.add).
OutcomeHook = Callable[[RunUpdate], None]


@dataclass(slots=True, eq=False)
class ActiveRun:
    """A run this node holds (claimed, running, waiting for a retry)."""

    run_id: str
    job: Job
    scheduled_for: datetime
    due_ms: int
    attempt: int
    origin: str = "schedule"
    skipped_before: int = 0
    started_at: datetime | None = None  # of the run's first attempt on record
    lateness_ms: int | None = None
    status: str = "claimed"
    running_written: bool = False
    in_attempt: bool = False
    attempt_started: datetime | None = None
    task: asyncio.Task[None] | None = None
    handle: asyncio.TimerHandle | None = None
    pending_claim: bool = False  # its row waits in the writer (database was down)
    mark_start: bool = False  # claimed under a coordinator lock: mark it started first
    check_job: bool = True  # re-check the job (deleted/paused/changed) before dispatch
    remote_in_flight: list[Run] = field(default_factory=list)
    done: bool = False
    deadline: float = 0.0  # loop time by which the attempt under way must end
    timed_out: bool = False

    @property
    def key(self) -> tuple[str, datetime]:
        return (self.run_id, self.scheduled_for)


class Dispatcher:
    """Starts attempts at their due time, bounded, and records their outcome."""

    def __init__(self, *, node_id: str, targets: dict[str, Any], writer: ResultWriter,
                 metrics: NodeMetrics, max_in_flight: int, lease_seconds: float,
                 lookup: JobLookup, start_marker: StartMarker | None = None,
                 on_outcome: OutcomeHook | None = None) -> None:
        self.node_id = node_id
        self.start_marker = start_marker
        self.on_outcome = on_outcome
        self._to_mark: list[ActiveRun] = []
        self.targets = targets
        self.writer = writer
        self.metrics = metrics
        # Never more attempts than the targets' connection pools hold: an
        # attempt waiting for a pooled connection would burn its timeout (and
        # then retry, adding load) where waiting in our queue costs nothing and
        # keeps priorities.
        self.max_in_flight = max(1, min([max_in_flight] + _pool_limits(targets)))
        self.lease_seconds = lease_seconds
        self.lookup = lookup
        self.active: dict[str, ActiveRun] = {}
        self.by_job: dict[str, dict[str, ActiveRun]] = {}
        self.running = 0
        self.waiting = PriorityQueue()
        self.fires_last_minute = MinuteCounter()
        # Bound metric children: the per-fire path skips the label lookups.
        self._lateness = metrics.lateness
        self._attempts_ok = metrics.attempts.labels("ok")
        self._attempts_failed = metrics.attempts.labels("failed")
        self._finished: dict[str, Any] = {}
        metrics.in_flight.set_function(lambda: self.running)
        self._ratelog = RateLimitedLog(log)
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.accepting = True

    # -- entry points -----------------------------------------------------

    def add(self, ar: ActiveRun, at_ms: int | None = None) -> None:
        """Hold ``ar`` and start its next attempt at ``at_ms`` (its due time by default)."""
        if ar.run_id in self.active:
            return
        self.writer.reclaim(ar.run_id)
        self.active[ar.run_id] = ar
        self.by_job.setdefault(ar.job.id, {})[ar.run_id] = ar
        self._schedule(ar, ar.due_ms if at_ms is None else at_ms)

    def holds(self, run_id: str) -> bool:
        return run_id in self.active

    def _schedule(self, ar: ActiveRun, at_ms: int) -> None:
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        # The loop's clock is monotonic, due times are wall-clock ms: convert
        # with a precise reading, aiming just past the millisecond so that a
        # callback is never sent before its Cronman-Scheduled-For.
        delay = (at_ms + SCHEDULE_MARGIN_MS) / 1000.0 - time.time()
        if delay <= 0:
            ar.handle = None
            loop.call_soon(self._due, ar)
        else:
            ar.handle = loop.call_at(loop.time() + delay, self._due, ar)

    def _due(self, ar: ActiveRun) -> None:
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
        if ar.attempt_started is None:
            # Only a wall-clock step backwards makes this true.
            early = ar.due_ms / 1000.0 - time.time()
            if early > 0:
                loop = self._loop or asyncio.get_running_loop()
                ar.handle = loop.call_at(loop.time() + early + SCHEDULE_MARGIN_MS / 1000.0,
                                         self._due, ar)
                return
        if ar.check_job:
            if ar.started_at is None:
                if not self._still_wanted(ar):
                    self._queue_mark(ar)  # handled (skipped): no replica takes it over
                    return
            elif self.lookup(ar.job.id)[1]:
                self._finish(ar, "failed", error=f"job deleted: attempt {ar.attempt} not made")
                return
        if ar.attempt_started is None and ar.started_at is None and ar.origin == "schedule":
            if not self._concurrency_allows(ar):
                self._queue_mark(ar)
                return
        if ar.mark_start and self.start_marker is not None:
            self._queue_mark(ar)
            return
        self._go(ar)

    def _queue_mark(self, ar: ActiveRun) -> None:
        """Mark the fire started in the coordinator (with the others of this
        loop turn); ``_go`` follows unless a replica took it over."""
        if not ar.mark_start or self.start_marker is None:
            return
        self._to_mark.append(ar)
        if len(self._to_mark) == 1:
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush_marks)

    def _go(self, ar: ActiveRun) -> None:
        if self.running >= self.max_in_flight:
            self.waiting.push(ar.job.priority, ar.due_ms, ar)
            return
        self._start(ar)

    def _flush_marks(self) -> None:
        batch, self._to_mark = self._to_mark, []
        if batch:
            task = (self._loop or asyncio.get_running_loop()).create_task(self._mark(batch))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)

    async def _mark(self, batch: list[ActiveRun]) -> None:
        assert self.start_marker is not None
        try:
            answers = await self.start_marker(batch)
        except asyncio.CancelledError:
            raise
        except Exception:  # a marker must not raise; if it does, the claims still stand
            log.exception("marking %d fires started failed; sending them", len(batch))
            answers = [START_GO] * len(batch)
        for ar, answer in zip(batch, answers, strict=True):
            if ar.done:
                continue
            ar.mark_start = False
            if answer == START_GO:
                self._go(ar)
            elif answer == START_TAKEN:
                self.metrics.taken_over.inc()
                self._ratelog.warning("taken-over", "run %s of job %s was taken over by a "
                                      "replica before this node started it (this node was "
                                      "late): not sent from here", ar.run_id, ar.job.id)
                self.writer.withdraw(ar.run_id)
                ar.done = True
                self._stop_local(ar)
                self._forget(ar)
            else:
                self._unreachable(ar)

    def _unreachable(self, ar: ActiveRun) -> None:
        """Neither the coordinator nor the database confirms the claim now:
        send nothing (a replica that reaches them takes the fire over). A
        claim still waiting in the writer is recorded ``skipped`` instead (and
        counted as not dispatched); a claim in the database is left to expire
        (the sweeper takes it over later)."""
        self._ratelog.error("start-unreachable", "run %s of job %s not sent: neither the "
                            "coordinator nor the database answered when it was due",
                            ar.run_id, ar.job.id)
        ar.done = True
        self._stop_local(ar)
        self._forget(ar)
        if ar.pending_claim:
            self.metrics.not_dispatched.inc()
            self.writer.withdraw(ar.run_id)
            now = utcnow()
            self.writer.record_unreachable([Run(
                id=ar.run_id, job_id=ar.job.id, scheduled_for=ar.scheduled_for,
                status="skipped", attempt=1, node_id=self.node_id, origin=ar.origin,
                claimed_at=now, finished_at=now, skipped_before=ar.skipped_before,
                error=f"not dispatched: node {self.node_id} could reach neither the "
                      f"coordinator nor the database when the fire was due")])

    def _still_wanted(self, ar: ActiveRun) -> bool:
        """Right before a claimed fire starts: is its job still there, active
        and unchanged (or changed in a way that keeps this fire time)?"""
        job, deleted = self.lookup(ar.job.id)
        if deleted:
            self._finish(ar, "skipped", error="job deleted before the run started")
            return False
        if job is None:
            return True  # no longer owned here: the claim still holds, fire it
        if job.paused:
            self._finish(ar, "skipped", error="job paused before the run started")
            return False
        if job.version != ar.job.version:
            if not _still_a_fire_time(job, ar.scheduled_for):
                self._finish(ar, "skipped",
                             error="job changed before the run started: this fire time is "
                                   "no longer in its schedule")
                return False
            ar.job = job
        return True

    def _concurrency_allows(self, ar: ActiveRun) -> bool:
        policy = ar.job.concurrency
        if policy == "allow":
            return True
        local = [r for r in self.by_job.get(ar.job.id, {}).values()
                 if r is not ar and not r.done and r.started_at is not None]
        remote = [r for r in ar.remote_in_flight
                  if r.node_id != self.node_id and r.id not in self.active]
        decision = policies.decide_concurrency(policy, [r.run_id for r in local]
                                               + [r.id for r in remote])
        if decision.action == "skip":
            self._finish(ar, "skipped", error=decision.error)
            return False
        if decision.action == "replace":
            reason = f"replaced by run {ar.run_id}"
            for prev in local:
                self._stop_local(prev)
                self._finish(prev, "failed", error=reason)
            now = utcnow()
            for r in remote:
                # The row becomes ours (as a sweeper's): the replaced run's node
                # can no longer overwrite this record with its own outcome.
                self.writer.update(RunUpdate(id=r.id, scheduled_for=r.scheduled_for,
                                             status="failed", error=reason, finished_at=now,
                                             extra={"node_id": self.node_id}))
                self.metrics.runs_finished.labels("failed").inc()
        return True

    # -- attempts ---------------------------------------------------------

    def _start(self, ar: ActiveRun) -> None:
        self.running += 1
        ar.in_attempt = True
        ar.status = "running"
        now = utcnow()
        ar.attempt_started = now
        if ar.started_at is None:
            ar.started_at = now
            ar.lateness_ms = to_ms(now) - ar.due_ms
            self._lateness.observe(max(0, ar.lateness_ms) / 1000.0)
            self.metrics.fires.labels(ar.origin).inc()
            self.fires_last_minute.add()
        loop = self._loop or asyncio.get_running_loop()
        ar.deadline = loop.time() + _timeout_of(ar.job.target) + TIMEOUT_MARGIN
        ar.timed_out = False
        ar.task = loop.create_task(self._attempt(ar))
        if self._watchdog is None:
            self._watchdog = loop.call_later(WATCHDOG_INTERVAL, self._watch)

    async def _attempt(self, ar: ActiveRun) -> None:
        try:
            outcome = await self._deliver(ar)
        except asyncio.CancelledError:
            if not ar.timed_out:
                self._release(ar)
                raise
            outcome = Outcome(ok=False, error=f"target gave no answer within "
                                              f"{_timeout_of(ar.job.target) + TIMEOUT_MARGIN:g} s")
        self._release(ar)
        if ar.done:
            return
        try:
            self._after_attempt(ar, outcome)
        except Exception as exc:  # a bug must not leave a run without a status
            log.exception("recording the outcome of run %s failed unexpectedly", ar.run_id)
            self._finish(ar, "failed", error=f"internal error in the scheduler: {exc!r}")

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

    async def _deliver(self, ar: ActiveRun) -> Outcome:
        target_spec = ar.job.target
        kind = str(target_spec.get("kind", ""))
        target = self.targets.get(kind)
        if target is None:
            error = NO_AGENT_ERROR if kind == "container" else f"no target for kind {kind!r}"
            return Outcome(ok=False, error=error, retryable=False)
        delivery = Delivery(job_id=ar.job.id, run_id=ar.run_id, scheduled_for=ar.scheduled_for,
                            attempt=ar.attempt, target=target_spec, namespace=ar.job.namespace,
                            job_name=ar.job.name)
        try:
            return await target.deliver(delivery)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a target must not raise; if it does, the run still ends
            log.exception("target %s raised for run %s", kind, ar.run_id)
            return Outcome(ok=False, error=f"target error: {exc!r}")

    def _release(self, ar: ActiveRun) -> None:
        if not ar.in_attempt:
            return
        ar.in_attempt = False
        ar.task = None
        ar.timed_out = False
        self.running -= 1
        while self.waiting and self.running < self.max_in_flight:
            nxt = self.waiting.pop()
            if not nxt.done:
                self._start(nxt)

    def _after_attempt(self, ar: ActiveRun, outcome: Outcome) -> None:
        now = utcnow()
        duration = _ms_between(ar.attempt_started, now)
        if outcome.ok:
            self._attempts_ok.inc()
            self._finish(ar, "succeeded", result=outcome.result or None, duration_ms=duration,
                         now=now)
            return
        kind = str(ar.job.target.get("kind", ""))
        self._attempts_failed.inc()
        self.metrics.dispatch_errors.labels(kind).inc()
        self._ratelog.warning(f"target:{kind}", "%s target: run %s of job %s attempt %d "
                              "failed: %s", kind, ar.run_id, ar.job.id, ar.attempt, outcome.error)
        delay = policies.next_retry_delay(ar.attempt, ar.job.retry, outcome.retryable)
        if delay is None or not self.accepting:
            if delay is not None:
                # Stopping: leave the retry to whoever takes the run over.
                self._wait_retry(ar, now, delay, outcome, duration, schedule=False)
                return
            self._finish(ar, "failed", result=outcome.result or None, error=outcome.error,
                         duration_ms=duration, now=now)
            return
        self._wait_retry(ar, now, delay, outcome, duration, schedule=True)

    def _wait_retry(self, ar: ActiveRun, now: datetime, delay: float, outcome: Outcome,
                    duration: int | None, *, schedule: bool) -> None:
        next_at = now + timedelta(seconds=delay)
        ar.status = "retrying"
        u = RunUpdate(
            id=ar.run_id, scheduled_for=ar.scheduled_for, status="retrying", attempt=ar.attempt,
            started_at=ar.started_at, lateness_ms=ar.lateness_ms, duration_ms=duration,
            result=outcome.result or None, error=outcome.error, next_attempt_at=next_at,
            lease_expires_at=now + timedelta(seconds=self.lease_seconds))
        if self.on_outcome is not None:
            self.on_outcome(u)
        self.writer.update(u)
        if schedule:
            ar.attempt += 1
            ar.running_written = False
            self._schedule(ar, to_ms(next_at))

    def _finish(self, ar: ActiveRun, status: str, *, result: dict[str, Any] | None = None,
                error: str | None = None, duration_ms: int | None = None,
                now: datetime | None = None) -> None:
        if ar.done:
            return
        ar.done = True
        ar.status = status
        now = now or utcnow()
        self._forget(ar)
        u = RunUpdate(
            id=ar.run_id, scheduled_for=ar.scheduled_for, status=status, attempt=ar.attempt,
            started_at=ar.started_at, finished_at=now, lateness_ms=ar.lateness_ms,
            duration_ms=duration_ms, result=result, error=error)
        if self.on_outcome is not None:
            self.on_outcome(u)
        self.writer.update(u)
        finished = self._finished.get(status)
        if finished is None:
            finished = self._finished[status] = self.metrics.runs_finished.labels(status)
        finished.inc()
        if status in ("failed", "lost") and ar.job.dead_letter:
            self.dead_letter(ar.job, Run(
                id=ar.run_id, job_id=ar.job.id, scheduled_for=ar.scheduled_for, status=status,
                attempt=ar.attempt, node_id=self.node_id, origin=ar.origin,
                started_at=ar.started_at, finished_at=now, lateness_ms=ar.lateness_ms,
                duration_ms=duration_ms, result=result, error=error,
                skipped_before=ar.skipped_before))

    def _forget(self, ar: ActiveRun) -> None:
        self.active.pop(ar.run_id, None)
        runs = self.by_job.get(ar.job.id)
        if runs is not None:
            runs.pop(ar.run_id, None)
            if not runs:
                del self.by_job[ar.job.id]

    def _stop_local(self, ar: ActiveRun) -> None:
        if ar.handle is not None:
            ar.handle.cancel()
            ar.handle = None
        if ar.task is not None:
            ar.task.cancel()
            self._release(ar)  # at once: a task cancelled before it ran has no finally

    # -- outside decisions ------------------------------------------------

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
        ar.done = True
        self._stop_local(ar)
        self._forget(ar)

    def hand_back(self) -> list[tuple[str, datetime]]:
        """Stop everything still held (graceful stop); returns the keys of runs
        whose lease must be expired so that a sweeper takes them over."""
        keys = []
        self.waiting.drain()
        for ar in list(self.active.values()):
            ar.done = True
        for ar in list(self.active.values()):
            ar.done = True
            self._stop_local(ar)
            self._forget(ar)
            if not ar.pending_claim:
                keys.append(ar.key)
        return keys

    def dead_letter(self, job: Job, run: Run) -> None:
        """Send the run record to the job's dead-letter target (in the background)."""
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(self._send_dead_letter(job, run))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _send_dead_letter(self, job: Job, run: Run) -> None:
        spec = job.dead_letter or {}
        kind = str(spec.get("kind", ""))
        target = self.targets.get(kind)
        try:
            from cronman.callbacks.dead_letter import dead_letter_delivery, run_record

            delivery = dead_letter_delivery(spec, run_record(run, job=job),
                                            namespace=job.namespace, job_name=job.name)
            if target is None:
                outcome = Outcome(ok=False, error=f"no target for kind {kind!r}")
            else:
                outcome = await asyncio.wait_for(target.deliver(delivery),
                                                 _timeout_of(spec) + TIMEOUT_MARGIN)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = Outcome(ok=False, error=repr(exc))
        self.metrics.dead_letters.labels("ok" if outcome.ok else "failed").inc()
        if not outcome.ok:
            self._ratelog.error(f"dlq:{job.id}", "dead-letter delivery for run %s of job %s "
                                "failed: %s", run.id, job.id, outcome.error)

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


def _pool_limits(targets: Any) -> list[int]:
    limits = []
    for target in getattr(targets, "values", lambda: [])():
        limit = getattr(target, "pool_limit", None) or getattr(target, "_pool_limit", None)
        if isinstance(limit, int) and limit > 0:
            limits.append(limit)
    return limits


def _timeout_of(spec: dict[str, Any]) -> float:
    try:
        value = float(spec.get("timeout") or DEFAULT_TARGET_TIMEOUT)
    except (TypeError, ValueError):
        value = DEFAULT_TARGET_TIMEOUT
    return max(0.1, value)


def _ms_between(a: datetime | None, b: datetime) -> int | None:
    if a is None:
        return None
    return to_ms(b) - to_ms(a)


def _still_a_fire_time(job: Job, t: datetime) -> bool:
    from cronman.schedules import job_times

    try:
        times = job_times(job)
        return times.next_fire_after(t - timedelta(microseconds=1)) == t
    except Exception:
        return False
