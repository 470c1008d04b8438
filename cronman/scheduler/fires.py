"""What flows through the scheduler's stages: a ``Fire`` (one fire time of one
job, from the job table to its claim), a ``Cursor`` (a job's place in its
schedule, written with the claims) and an ``ActiveRun`` (a run a node holds,
from its claim -- or takeover, sweep, request -- until it reaches a final
status or is handed back)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cronman.ids import run_id_for
from cronman.models import Job, Run
from cronman.observability.tracing import RunTrace
from cronman.timeutil import from_ms, to_ms
from cronman.vocabulary import MANUAL_ORIGINS, RunOrigin, RunStatus

# How long a fire lock lives in the coordinator. Replicas claim the same fire
# within well under a second of each other; the lock only has to outlive that
# (and database outages, during which it is the only fence).
LOCK_TTL_MS = 120_000

# A job's place in its schedule: (job id, next fire time, fire times skipped before it).
Cursor = tuple[str, datetime, int]


class Fire:
    """One fire time of one job, on its way from the heap to a target.

    Its run id and ``scheduled_for`` are worked out on first use: a fire
    this node only watches for its first owner never needs them, unless it
    is taken over.
    """

    __slots__ = ("job", "fire_ms", "due_ms", "skipped_before", "primary", "_run_id",
                 "_scheduled_for")

    def __init__(self, job: Job, fire_ms: int, due_ms: int, skipped_before: int = 0,
                 run_id: str = "", scheduled_for: datetime | None = None,
                 primary: str | None = None) -> None:
        self.job = job
        self.fire_ms = fire_ms
        self.due_ms = due_ms
        self.skipped_before = skipped_before
        # The job's first owner when it is another node (None: the node
        # holding this fire is the first owner): it claims the fire, this
        # node watches.
        self.primary = primary
        self._run_id = run_id
        self._scheduled_for = scheduled_for

    @property
    def scheduled_for(self) -> datetime:
        t = self._scheduled_for
        if t is None:
            t = self._scheduled_for = from_ms(self.fire_ms)
        return t

    @property
    def run_id(self) -> str:
        rid = self._run_id
        if not rid:
            rid = self._run_id = run_id_for(self.job.id, self.scheduled_for)
        return rid

    def __repr__(self) -> str:
        return (f"Fire(job={self.job.id!r}, fire_ms={self.fire_ms}, due_ms={self.due_ms}, "
                f"skipped_before={self.skipped_before}, primary={self.primary!r})")


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
    waiting: bool = False  # waiting for upstream jobs or in a buffer, marked started
    gate_passed: bool = False  # its depends_on was satisfied: no second wait
    trace: RunTrace | None = None  # its spans here, when tracing is on
    held_checked: int = 0  # the attempt before which this node found it still held the run
    # What the limits' gate granted the attempt under way (``dispatch.limits.Hold``).
    limits: Any = None
    buffer_passed: bool = False  # let through its job's buffer (``dispatch.buffers``)
    # The error of an operator's cancel being carried out (``dispatch.cancels``).
    cancel_error: str | None = None

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
    def of_requested(cls, run: Run, job: Job, now_ms: int,
                     remote_in_flight: Sequence[Run] = ()) -> ActiveRun:
        """A run the API requested (trigger, replay, backfill): dispatched as
        asked, without the schedule's checks, due from its request; or a run
        an upstream's success made (origin ``upstream``): it passes its job's
        checks and gates as a fire of the schedule does, its job's concurrency
        policy against ``remote_in_flight`` too."""
        upstream = run.origin == RunOrigin.UPSTREAM
        return cls(run_id=run.id, job=job, scheduled_for=run.scheduled_for,
                   due_ms=due_ms_of(run, now_ms), attempt=max(1, run.attempt),
                   origin=run.origin, skipped_before=run.skipped_before, check_job=upstream,
                   gate=run.gate, remote_in_flight=list(remote_in_flight))
