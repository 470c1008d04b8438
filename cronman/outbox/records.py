"""The notifications' records: the rules as the notifier applies them, the
events a pass finds, the outbox's messages and events. Pure, no I/O.

The notifier (``cronman.notify``) makes them, the store
(``cronman.store.notify_outbox``) keeps them: they live here, below both, so
the store imports nothing of the layer above it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronman.vocabulary import DEFAULT_DIGEST_INTERVAL


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as the notifier applies it.

    ``key`` is the rule's identity in the outbox: ``ns:<rule id>`` for a
    namespace rule, ``job:<job id>:<digest of the rule>`` for a job's own
    (a digest rather than a position: reordering a job's rules keeps them).
    """

    key: str
    events: frozenset[str]
    late_after: float | None
    channel: Mapping[str, Any]
    digest_interval: float

    def wants(self, event: str) -> bool:
        return event in self.events



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


def _digest(value: Any, size: int = 8) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def _rule(key: str, spec: Mapping[str, Any]) -> Rule:
    late = spec.get("late_after")
    return Rule(key=key, events=frozenset(spec["events"]),
                late_after=None if late is None else float(late),
                channel=spec["channel"],
                digest_interval=float(spec.get("digest_interval") or DEFAULT_DIGEST_INTERVAL))


def job_rules(job_id: str, notify: Sequence[Mapping[str, Any]] | None) -> list[Rule]:
    """The rules of a job's own ``notify`` list (stored, so already validated)."""
    if not notify:
        return []
    rules: dict[str, Rule] = {}
    for spec in notify:
        key = f"job:{job_id}:{_digest(spec)}"
        rules.setdefault(key, _rule(key, spec))  # the same rule twice is one rule
    return list(rules.values())


def namespace_rule(rule_id: str, spec: Mapping[str, Any]) -> Rule:
    return _rule(f"ns:{rule_id}", spec)


def group_key(rule: Rule, job_id: str) -> str:
    """The rate limit's unit: one rule, one job, one destination."""
    return _digest([rule.key, job_id, rule.channel], 16)
