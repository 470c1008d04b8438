"""Value objects shared by the store, the API and the scheduler."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class Job:
    """A job definition as stored (already validated and normalised).

    ``schedule``, ``target``, ``retry``, ``misfire`` and ``dead_letter`` are the
    normalised JSON objects of SPEC §3 (defaults filled in).
    """

    id: str
    namespace: str
    name: str
    version: int
    schedule: dict[str, Any]
    target: dict[str, Any]
    retry: dict[str, Any]
    misfire: dict[str, Any]
    delivery: str
    concurrency: str
    priority: int
    start_at: datetime | None
    end_at: datetime | None
    jitter: float | None
    paused: bool
    labels: dict[str, str]
    dead_letter: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    change_seq: int = 0
    last_fire_at: datetime | None = None
    skipped_pending: int = 0
    # The job's own notification rules (cronman.notify.rules), None for none.
    notify: list[dict[str, Any]] | None = None
    # Upstream jobs whose fresh success a fire waits for: [{"job": <id>,
    # "within": s, "wait": s}], None for none (cronman.api.workflow_validation).
    depends_on: list[dict[str, Any]] | None = None
    # Named exclusion calendars whose dates skip a fire: names in the job's
    # namespace or namespace/name, None for none.
    calendars: list[str] | None = None
    # ``buffer_all``'s bound (None: ``DEFAULT_BUFFER_LIMIT``); the circuit
    # breaker's ``pause_after_failures``; ``max_runs`` (None: no limit).
    buffer_limit: int | None = None
    pause_after_failures: int | None = None
    max_runs: int | None = None
    # What the store keeps for those policies (cronman.store.run_policies):
    # failed or lost runs in a row, runs ended (skipped ones left out), when
    # ``max_runs`` was reached; why the job paused itself, the operator's note.
    failure_streak: int = 0
    runs_done: int = 0
    done_at: datetime | None = None
    pause_reason: str | None = None
    pause_note: str | None = None
    paused_at: datetime | None = None

    @property
    def counts_runs(self) -> bool:
        """Whether the ends of the job's runs are counted (a breaker or a run limit)."""
        return self.pause_after_failures is not None or self.max_runs is not None


class JobRow(NamedTuple):
    """A live job as a scheduler node reads it: the columns it needs, the
    JSON ones as their text (each distinct text is decoded once, however
    many jobs share it)."""

    id: str
    namespace: str
    name: str
    version: int
    schedule: str
    target: str
    retry: str
    misfire: str
    delivery: str
    concurrency: str
    priority: int
    start_at: datetime | None
    end_at: datetime | None
    jitter: float | None
    paused: bool
    dead_letter: str | None
    created_at: datetime
    change_seq: int
    last_fire_at: datetime | None
    skipped_pending: int
    depends_on: str | None = None
    calendars: str | None = None
    buffer_limit: int | None = None
    pause_after_failures: int | None = None
    max_runs: int | None = None

    @classmethod
    def of_job(cls, job: Job) -> JobRow:
        """The row ``job`` would have been read as."""
        return cls(job.id, job.namespace, job.name, job.version, _dumps(job.schedule),
                   _dumps(job.target), _dumps(job.retry), _dumps(job.misfire), job.delivery,
                   job.concurrency, job.priority, job.start_at, job.end_at, job.jitter,
                   job.paused, None if job.dead_letter is None else _dumps(job.dead_letter),
                   job.created_at, job.change_seq, job.last_fire_at, job.skipped_pending,
                   None if job.depends_on is None else _dumps(job.depends_on),
                   None if job.calendars is None else _dumps(job.calendars),
                   job.buffer_limit, job.pause_after_failures, job.max_runs)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Run:
    """One row of ``scheduled_jobs``: the history of one fire time."""

    id: str
    job_id: str
    scheduled_for: datetime
    status: str
    attempt: int = 0
    node_id: str | None = None
    origin: str = "schedule"
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lateness_ms: int | None = None
    duration_ms: int | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    lease_expires_at: datetime | None = None
    next_attempt_at: datetime | None = None
    skipped_before: int = 0
    # What gated the run (cronman.scheduler.dispatch.gates): the upstream runs it
    # consumed or found fresh, what it waited for, the calendar that skipped it.
    gate: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list answer."""

    items: list[Any]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    namespace: str | None = None
    namespaces: tuple[str, ...] | None = None  # restriction from the caller's token
    labels: tuple[tuple[str, str], ...] = ()
    paused: bool | None = None
    name_prefix: str | None = None
    name: str | None = None  # exactly this name (case-sensitive)


@dataclass(frozen=True, slots=True)
class RunFilter:
    since: datetime | None = None
    until: datetime | None = None
    statuses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunSearch:
    """What ``RunStore.search_runs`` looks for: runs across jobs.

    ``since`` is required: every query names the partition key, so PostgreSQL
    reads only the daily partitions of the window. ``namespaces`` is the
    caller's token restriction (None: every namespace); ``namespace``,
    ``job_ids`` and ``target_kinds`` narrow further.
    """

    since: datetime
    until: datetime | None = None
    statuses: tuple[str, ...] = ()
    namespace: str | None = None
    namespaces: tuple[str, ...] | None = None
    job_ids: tuple[str, ...] = ()
    target_kinds: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunStatsQuery:
    """The window and scope of ``RunStore.run_stats``: [since, until) in steps
    of ``step_seconds``; ``since`` should be a multiple of the step."""

    since: datetime
    until: datetime
    step_seconds: int
    namespace: str | None = None
    namespaces: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RunStatsBucket:
    """One time step of the run history.

    ``fires``: runs scheduled in the step that were dispatched (every status
    but ``skipped``); ``failures``: those that ended ``failed`` or ``lost``;
    lateness percentiles (nearest rank, over runs whose first attempt
    started, manual ones -- trigger, replay, backfill -- left out) in
    milliseconds, None when no such run started.
    """

    start: datetime
    fires: int
    failures: int
    lateness_p50_ms: int | None
    lateness_p99_ms: int | None


@dataclass(slots=True)
class RunUpdate:
    """A change to one run written back by the scheduler (in batches).

    Only fields that are not None are written, except ``error`` and ``result``,
    which are always written with the status.
    """

    id: str
    scheduled_for: datetime
    status: str
    attempt: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lateness_ms: int | None = None
    duration_ms: int | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    lease_expires_at: datetime | None = None
    next_attempt_at: datetime | None = None
    gate: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The run's job, when the job counts the ends of its runs (a breaker, a
    # run limit: ``Job.counts_runs``): a final status is then counted once,
    # in the transaction that writes it (cronman.store.run_policies).
    counted_job: str | None = None

    def absorb(self, newer: RunUpdate) -> None:
        """Apply ``newer`` (a later change of the same run) on top of this one:
        status, error and result come from ``newer``; the other fields from
        ``newer`` where set, else stay."""
        self.status = newer.status
        self.error = newer.error
        self.result = newer.result
        for name in _MERGED_FIELDS:
            value = getattr(newer, name)
            if value is not None:
                setattr(self, name, value)
        if newer.extra:
            self.extra = {**self.extra, **newer.extra}
        if newer.counted_job is not None:
            self.counted_job = newer.counted_job

    def copy(self) -> RunUpdate:
        return replace(self, extra=dict(self.extra))


_MERGED_FIELDS = ("attempt", "started_at", "finished_at", "lateness_ms", "duration_ms",
                  "lease_expires_at", "next_attempt_at", "gate")
