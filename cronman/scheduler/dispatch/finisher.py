"""How a held run's attempts end: its final status, or its wait for a retry.

A failed attempt is retried after the policy's backoff (``retrying``, with
``next_attempt_at``; the run holds no slot meanwhile); the last failure, or a
non-retryable one, ends the run ``failed`` and fires its dead-letter target.
Every status change goes to the result writer; the end of each attempt (a
final status, or ``retrying``) also goes to the ``OutcomeSink`` at once: the
node's outcome marks, which spare a run whose node dies before the writer's
flush from being sent again. The final update of a run whose job counts its
runs (a breaker, a run limit) names the job: the store counts it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Protocol

from cronman.callbacks.base import Outcome
from cronman.models import Run, RunUpdate
from cronman.scheduler import policies
from cronman.scheduler.dispatch.dead_letters import DeadLetters
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.timeutil import from_ms, to_ms

log = logging.getLogger(__name__)

class OutcomeSink(Protocol):
    """Told of each update that ends an attempt (``record.outcome_marks.OutcomeMarker``)."""

    def add(self, u: RunUpdate) -> None:
        """An attempt ended as ``u`` says (a final status, or ``retrying``)."""


class RunHolder(Protocol):
    """Who holds the runs (the dispatcher): told when one reached its final status."""

    def forget(self, ar: ActiveRun) -> None:
        """``ar`` is done: stop holding it."""


class RunFinisher:
    """Records the end of attempts and runs: the writer's update, the
    outcomes' sink, the metrics and the dead letter; the ``holder`` forgets
    a run that reached its final status."""

    def __init__(self, *, node_id: str, writer: ResultWriter, metrics: NodeMetrics,
                 clock: ReferenceClock, lease_seconds: float, dead_letters: DeadLetters,
                 outcomes: OutcomeSink | None, holder: RunHolder) -> None:
        self._node_id = node_id
        self._writer = writer
        self._metrics = metrics
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._dead_letters = dead_letters
        # Bound once: called per fire.
        self._on_outcome = None if outcomes is None else outcomes.add
        self._forget = holder.forget
        # Bound metric children: the per-fire path skips the label lookups.
        self._attempts_ok = metrics.attempts.labels("ok")
        self._attempts_failed = metrics.attempts.labels("failed")
        self._finished: dict[str, Any] = {}
        self._ratelog = RateLimitedLog(log)

    def after_attempt(self, ar: ActiveRun, outcome: Outcome, *, accepting: bool) -> int | None:
        """Record how ``ar``'s attempt ended. Returns when (reference ms) its
        next attempt is due, or None when there is none to schedule here."""
        if outcome.handed_off:
            self.hand_off(ar)
            return None
        now_ms = self._clock.now_ms()
        now = from_ms(now_ms)
        started = ar.attempt_started_ms
        duration = None if started is None else now_ms - started
        if outcome.ok:
            self._attempts_ok.inc()
            self.finish(ar, "succeeded", result=outcome.result or None, duration_ms=duration,
                        now=now)
            return None
        kind = str(ar.job.target.get("kind", ""))
        self._attempts_failed.inc()
        self._metrics.dispatch_errors.labels(kind).inc()
        self._ratelog.warning(f"target:{kind}", "%s target: run %s of job %s attempt %d "
                              "failed: %s", kind, ar.run_id, ar.job.id, ar.attempt, outcome.error)
        if outcome.lost:
            # Its worker vanished mid-attempt: what a sweeper does for a run
            # whose node died (a new attempt at once, or ``lost``).
            if policies.recovery_action(ar.job.delivery, "running") == "lost":
                self.finish(ar, "lost", result=outcome.result or None, error=outcome.error,
                            duration_ms=duration, now=now)
                return None
            return self._wait_retry(ar, now, 0.0, outcome, duration, schedule=accepting)
        delay = policies.next_retry_delay(ar.attempt, ar.job.retry, outcome.retryable)
        if delay is None or not accepting:
            if delay is not None:
                # Stopping: leave the retry to whoever takes the run over.
                return self._wait_retry(ar, now, delay, outcome, duration, schedule=False)
            self.finish(ar, "failed", result=outcome.result or None, error=outcome.error,
                        duration_ms=duration, now=now)
            return None
        return self._wait_retry(ar, now, delay, outcome, duration, schedule=True)

    def hand_off(self, ar: ActiveRun) -> None:
        """The run went to a work queue, which writes its status from now
        on: forget it here, without a write or a dead letter."""
        if ar.done:
            return
        ar.done = True
        self._forget(ar)
        self._attempts_ok.inc()
        self._metrics.runs_handed_off.inc()

    def _wait_retry(self, ar: ActiveRun, now: datetime, delay: float, outcome: Outcome,
                    duration: int | None, *, schedule: bool) -> int | None:
        next_at = now + timedelta(seconds=delay)
        ar.status = "retrying"
        u = RunUpdate(
            id=ar.run_id, scheduled_for=ar.scheduled_for, status="retrying", attempt=ar.attempt,
            started_at=ar.started_at, lateness_ms=ar.lateness_ms, duration_ms=duration,
            result=outcome.result or None, error=outcome.error, next_attempt_at=next_at,
            lease_expires_at=now + timedelta(seconds=self._lease_seconds))
        if self._on_outcome is not None:
            self._on_outcome(u)
        self._writer.update(u)
        if not schedule:
            return None
        ar.attempt += 1
        ar.running_written = False
        return to_ms(next_at)

    def finish(self, ar: ActiveRun, status: str, *, result: dict[str, Any] | None = None,
               error: str | None = None, duration_ms: int | None = None,
               now: datetime | None = None) -> None:
        """End ``ar`` with ``status`` (once: a run already done is left alone)."""
        if ar.done:
            return
        ar.done = True
        ar.status = status
        now = now or self._clock.now()
        self._forget(ar)
        u = RunUpdate(
            id=ar.run_id, scheduled_for=ar.scheduled_for, status=status, attempt=ar.attempt,
            started_at=ar.started_at, finished_at=now, lateness_ms=ar.lateness_ms,
            duration_ms=duration_ms, result=result, error=error, gate=ar.gate,
            counted_job=ar.job.id if ar.job.counts_runs else None)
        if self._on_outcome is not None:
            self._on_outcome(u)
        self._writer.update(u)
        finished = self._finished.get(status)
        if finished is None:
            finished = self._finished[status] = self._metrics.runs_finished.labels(status)
        finished.inc()
        if status in ("failed", "lost"):
            self._metrics.namespaces.failed(ar.job.namespace)
        if status in ("failed", "lost") and ar.job.dead_letter:
            self._dead_letters.send(ar.job, Run(
                id=ar.run_id, job_id=ar.job.id, scheduled_for=ar.scheduled_for, status=status,
                attempt=ar.attempt, node_id=self._node_id, origin=ar.origin,
                started_at=ar.started_at, finished_at=now, lateness_ms=ar.lateness_ms,
                duration_ms=duration_ms, result=result, error=error,
                skipped_before=ar.skipped_before, gate=ar.gate))
