"""Runs the API requested (trigger, replay, backfill): taken and dispatched at once.

The API stores them as in-flight runs with no node; a node takes a batch
atomically (``take_requested_runs``) when it hears ``RUNS_REQUESTED`` on the
change feed, and by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime, timedelta

from cronman.errors import StoreUnavailable
from cronman.models import Run, RunUpdate
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.dispatch.in_flight import in_flight_besides
from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.jobs.source import JobSource
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import RunStore
from cronman.timeutil import to_ms
from cronman.vocabulary import GATED_ORIGINS, ConcurrencyPolicy, RunStatus

log = logging.getLogger(__name__)

TAKE_LIMIT = 500


class RequestedRuns:
    """Takes requested runs and hands them to the dispatcher."""

    def __init__(self, node_id: str, jobs: JobSource, runs: RunStore, dispatcher: Dispatcher, writer: ResultWriter, *, lease_seconds: float,
                 poll: float, clock: ReferenceClock, pool: Pool, lifecycle: Lifecycle,
                 metrics: NodeMetrics) -> None:
        self.node_id = node_id
        self._clock = clock
        self._jobs = jobs
        self._runs = runs
        self._dispatcher = dispatcher
        self._writer = writer
        self._lease_seconds = lease_seconds
        self._poll = poll
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._event = asyncio.Event()
        self._ratelog = RateLimitedLog(log)

    def kick(self) -> None:
        """Runs were requested: take them now."""
        self._event.set()

    async def run(self) -> None:
        while not self._lifecycle.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), self._poll)
            self._event.clear()
            if self._lifecycle.stopping:
                return
            try:
                while await self.take_once():
                    pass
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("take_requested").inc()
                self._ratelog.error("requested", "cannot take requested runs (database "
                                    "unreachable): %s", exc)

    async def take_once(self) -> bool:
        """Take one batch; True when there may be more."""
        until = self._clock.now() + timedelta(seconds=self._lease_seconds)
        started_ns = time.time_ns()
        runs = await self._pool(self._take, until)
        # The take is these runs' claim (their trace's ``cronman.claim`` span).
        claimed = (started_ns, time.time_ns(), len(runs))
        jobs = await self._jobs.jobs_of([r.job_id for r in runs]) if runs else {}
        guarded = sorted({r.job_id for r in runs if r.origin in GATED_ORIGINS
                          and (job := jobs.get(r.job_id)) is not None
                          and job.concurrency != ConcurrencyPolicy.ALLOW})
        # A run an upstream made weighs its job's runs in flight as a fire does.
        in_flight = await self._pool(in_flight_besides, self._runs, guarded,
                                     {r.id for r in runs}) if guarded else {}
        now = self._clock.now_ms()
        for run in runs:
            job = jobs.get(run.job_id)
            if job is None or job.deleted_at is not None:
                self._writer.update(RunUpdate(id=run.id, scheduled_for=run.scheduled_for,
                                              status=RunStatus.SKIPPED.value,
                                              finished_at=self._clock.now(),
                                              error="job deleted before the run started"))
                continue
            self._dispatcher.add(ActiveRun.of_requested(run, job, now,
                                                        in_flight.get(run.job_id, ())),
                                 max(now, to_ms(run.scheduled_for)), claimed)
        return len(runs) >= TAKE_LIMIT and not self._lifecycle.stopping

    def _take(self, until: datetime) -> list[Run]:
        return self._runs.take_requested_runs(self.node_id, until, TAKE_LIMIT)
