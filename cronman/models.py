"""Value objects shared by the store, the API and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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


@dataclass(frozen=True, slots=True)
class RunFilter:
    since: datetime | None = None
    until: datetime | None = None
    statuses: tuple[str, ...] = ()


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
    extra: dict[str, Any] = field(default_factory=dict)
