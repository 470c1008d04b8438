"""Value objects of the notifications, and the store contract the notifier uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cronman.models import Job
from cronman.notify.rules import Rule


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A run as the notifier reads it (a failure, or a success ending one)."""

    id: str
    job_id: str
    scheduled_for: datetime
    status: str
    attempt: int
    finished_at: datetime | None = None
    error: str | None = None
    node_id: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One event found for one rule: the unit of deduplication.

    ``event_key`` names the event itself (``failed:<run id>:<attempt>``,
    ``late:<job id>:<fire ms>``...); with the rule's key it is unique in the
    outbox, whichever notifier found it.
    """

    rule: Rule
    kind: str
    event_key: str
    job_id: str
    namespace: str
    job_name: str
    occurred_at: datetime
    run_id: str | None = None
    scheduled_for: datetime | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FailingJob:
    """A job with a recovery to watch for: its latest failure."""

    job_id: str
    last_failure_at: datetime  # the scheduled time of the latest failed run
    last_failure_run_id: str
    failures: int
    since: datetime  # when the first failure of this streak was found


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one detection pass found, written in one transaction.

    ``seen_runs`` (run id, scheduled_for, attempt) are marked read whether or
    not any rule wanted them; ``late_through`` moves the ``late`` cursor.
    """

    seen_runs: Sequence[tuple[str, datetime, int]] = ()
    events: Sequence[Event] = ()
    failing: Sequence[FailingJob] = ()
    recovered: Sequence[str] = ()  # job ids no longer failing
    late_through: datetime | None = None


@dataclass(frozen=True, slots=True)
class Notification:
    """One row of the outbox: one message (an event alone, or a digest)."""

    id: str
    namespace: str
    job_id: str
    job_name: str
    rule_key: str
    group_key: str
    channel: dict[str, Any]
    kind: str
    event: str | None
    status: str
    attempts: int
    due_at: datetime
    next_attempt_at: datetime
    last_error: str | None
    event_count: int
    created_at: datetime
    updated_at: datetime
    sent_at: datetime | None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored event (a row of ``notification_events``)."""

    id: int
    notification_id: str | None
    rule_key: str
    event_key: str
    event: str
    job_id: str
    run_id: str | None
    scheduled_for: datetime | None
    occurred_at: datetime
    detail: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NotificationFilter:
    namespace: str | None = None
    namespaces: tuple[str, ...] | None = None  # restriction from the caller's token
    job_id: str | None = None
    statuses: tuple[str, ...] = ()
    events: tuple[str, ...] = ()  # event kinds; "digest" for digests


class Outbox(Protocol):
    """What the notifier reads and writes (one SQL implementation:
    ``cronman.store.notify_outbox``). Each method is one transaction."""

    def unnotified_runs(self, limit: int) -> list[FinishedRun]:
        """Failed and lost runs not read yet (in this attempt), oldest scheduled first."""

    def failing_jobs(self) -> list[FailingJob]: ...

    def first_successes(self, since: Mapping[str, datetime]) -> dict[str, FinishedRun]:
        """Per job: its earliest succeeded run scheduled at or after the given time."""

    def run_starts(self, keys: Sequence[tuple[str, datetime]]
                   ) -> dict[tuple[str, datetime], tuple[str, datetime | None, str]]:
        """(status, started_at, origin) of the runs at these (job id, scheduled_for)."""

    def cursor(self, name: str) -> datetime | None: ...

    def jobs_to_watch(self, namespaces: Sequence[str], *, with_rules: bool) -> list[Job]:
        """Live jobs of these namespaces, and (``with_rules``) every live job
        with rules of its own."""

    def write_pass(self, result: PassResult, *, now: datetime, node_id: str) -> int:
        """Record a pass (see ``PassResult``); events already stored for
        their rule are skipped. Returns the number of new messages."""

    def claim_due(self, now: datetime, lease_until: datetime, limit: int) -> list[Notification]:
        """Take messages due by ``now`` (and ones whose sender's lease ran out):
        status sending, one more attempt, leased until ``lease_until``."""

    def release_claims(self, now: datetime) -> int:
        """Messages left ``sending`` by a notifier no longer active: pending, due now."""

    def events_of(self, notification_id: str, limit: int) -> list[EventRecord]: ...

    def mark_sent(self, note: Notification, now: datetime) -> bool: ...

    def mark_unsent(self, note: Notification, error: str, now: datetime,
                    retry_at: datetime | None) -> bool:
        """A failed attempt: pending again until ``retry_at``, or failed for
        good when ``retry_at`` is None."""

    def backlog(self, now: datetime) -> tuple[int, int]:
        """(messages waiting to be sent, of which overdue by a minute or more)."""

    def purge(self, before: datetime) -> int:
        """Drop what was sent or failed before ``before``; returns rows dropped."""


class JobSource(Protocol):
    """What the detector reads of the jobs (``store.base.JobStore`` has it)."""

    def current_change_seq(self) -> int:
        """The largest change_seq written so far."""

    def jobs_changed_since(self, change_seq: int, limit: int = 10_000) -> list[Job]:
        """Jobs (tombstones included) whose change_seq is greater, ascending."""

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The listed jobs, tombstones included."""


class RuleSource(Protocol):
    def all_rules(self) -> dict[str, list[Rule]]:
        """The namespace rules, by namespace."""


@dataclass(frozen=True, slots=True)
class RuleRecord:
    """A namespace rule as stored (``/v1/notification-rules``)."""

    id: str
    namespace: str
    name: str
    rule: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
