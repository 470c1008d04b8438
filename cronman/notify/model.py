"""The stores the notifier reads and writes: the outbox, the jobs, the
namespace rules (one SQL implementation each, in ``cronman.store``).

The records they speak in are in ``cronman.outbox.records``, below both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from cronman.models import Job
from cronman.outbox.records import (
    EventRecord,
    FailingJob,
    FinishedRun,
    Notification,
    PassResult,
    Rule,
)


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

    def claims(self) -> list[tuple[str, int]]:
        """The messages being sent now: (id, attempt) of each."""

    def release_claims(self, now: datetime, claims: list[tuple[str, int]]) -> int:
        """Of ``claims``, those still ``sending`` in that attempt: pending, due now."""

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
