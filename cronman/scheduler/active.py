"""A run a node holds, from its claim (or takeover, sweep, request) until it
reaches a final status or is handed back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cronman.models import Job, Run
from cronman.scheduler.claims import Fire
from cronman.timeutil import to_ms
from cronman.vocabulary import MANUAL_ORIGINS, RunOrigin, RunStatus


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def due_ms_of(run: Run, now_ms: int) -> int:
    """When ``run`` is due, the time its lateness is measured from: its
    scheduled time; for a manual run (trigger, replay, backfill) the later of
    that and its request (``claimed_at``, the API's clock, never past
    ``now_ms``, this node's reference time): a replay of an hour-old run is
    due when it was asked for, not an hour ago."""
    due = to_ms(run.scheduled_for)
    if run.origin in MANUAL_ORIGINS and run.claimed_at is not None:
        return max(due, min(to_ms(run.claimed_at), now_ms))
    return due


@dataclass(slots=True, eq=False)
class ActiveRun:
    """A run this node holds (claimed, running, waiting for a retry)."""

    run_id: str
    job: Job
    scheduled_for: datetime
    due_ms: int  # its scheduled time, or a manual run's request (``due_ms_of``)
    attempt: int
    origin: str = RunOrigin.SCHEDULE.value
    skipped_before: int = 0
    started_at: datetime | None = None  # of the run's first attempt on record
    lateness_ms: int | None = None
    status: str = RunStatus.CLAIMED.value
    running_written: bool = False
    in_attempt: bool = False
    attempt_started_ms: int | None = None  # reference ms of the attempt under way's start
    task: asyncio.Task[None] | None = None
    handle: Cancellable | None = None  # its wait for its due time, or a retry's
    pending_claim: bool = False  # its row waits in the writer (database was down)
    mark_start: bool = False  # its row is ours but not started: mark it started first
    marking: int = 0  # where its start mark stands (``start_marks.NOT_ASKED``...)
    check_job: bool = True  # re-check the job (deleted/paused/changed) before dispatch
    remote_in_flight: list[Run] = field(default_factory=list)
    done: bool = False
    deadline: float = 0.0  # loop time by which the attempt under way must end
    timed_out: bool = False
    # What gated the run (``Run.gate``: upstream runs consumed or found fresh,
    # waits, a calendar), written with its outcome.
    gate: dict[str, Any] | None = None
    waiting: bool = False  # waiting for upstream jobs (``depends_on``), marked started
    gate_passed: bool = False  # its depends_on was satisfied: no second wait

    @property
    def key(self) -> tuple[str, datetime]:
        return (self.run_id, self.scheduled_for)

    @classmethod
    def of_fire(cls, fire: Fire, *, pending_claim: bool = False, mark_start: bool = False,
                remote_in_flight: Sequence[Run] = ()) -> ActiveRun:
        """A fire of the schedule this node claimed or took over: attempt 1."""
        return cls(run_id=fire.run_id, job=fire.job, scheduled_for=fire.scheduled_for,
                   due_ms=fire.due_ms, attempt=1, skipped_before=fire.skipped_before,
                   pending_claim=pending_claim, mark_start=mark_start,
                   remote_in_flight=list(remote_in_flight))

    @classmethod
    def of_swept(cls, run: Run, job: Job, now_ms: int) -> ActiveRun:
        """A run taken over after its lease expired, carried on as its next
        attempt (its record so far -- first start, lateness -- kept)."""
        return cls(run_id=run.id, job=job, scheduled_for=run.scheduled_for,
                   due_ms=due_ms_of(run, now_ms), attempt=run.attempt + 1, origin=run.origin,
                   skipped_before=run.skipped_before, started_at=run.started_at,
                   lateness_ms=run.lateness_ms, status=run.status, gate=run.gate)

    @classmethod
    def of_requested(cls, run: Run, job: Job, now_ms: int) -> ActiveRun:
        """A run the API requested (trigger, replay, backfill): dispatched as
        asked, without the schedule's checks, due from its request; or a run
        an upstream's success made (origin ``upstream``): it passes its job's
        checks and gates as a fire of the schedule does."""
        upstream = run.origin == RunOrigin.UPSTREAM
        return cls(run_id=run.id, job=job, scheduled_for=run.scheduled_for,
                   due_ms=due_ms_of(run, now_ms), attempt=max(1, run.attempt),
                   origin=run.origin, skipped_before=run.skipped_before, check_job=upstream,
                   gate=run.gate)
