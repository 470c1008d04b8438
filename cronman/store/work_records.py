"""Records the work queue's contract (``base.WorkQueueStore``) speaks in:
what the scheduler hands a queue, an item as it stands, a claim, and a
queue's figures. Beside ``base.py`` so the contract imports no implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronman.models import Run


@dataclass(frozen=True, slots=True)
class WorkOrder:
    """One attempt of a worker run handed to its queue by the node holding it."""

    run_id: str
    scheduled_for: datetime
    job_id: str
    namespace: str
    queue: str
    priority: int
    due_at: datetime
    attempt: int
    payload: Any
    heartbeat_timeout: int
    timeout: int
    delivery: str
    retry: dict[str, Any]
    node_id: str
    capacity_idle: int | None = None
    capacity_wait: int | None = None
    # The attempt's trace context (``traceparent``, ``tracestate``), empty
    # unless tracing is on: the claim hands it to the worker.
    trace: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A worker run as its queue holds it (``state``: a ``vocabulary.WorkState``;
    ``waiting_capacity`` is a queued item whose queue lacks idle workers, then
    ``idle_workers`` says how many it has)."""

    run_id: str
    scheduled_for: datetime
    job_id: str
    namespace: str
    queue: str
    priority: int
    due_at: datetime
    available_at: datetime
    attempt: int
    state: str
    payload: Any
    heartbeat_timeout: int
    timeout: int
    deadline_at: datetime | None = None
    capacity_idle: int | None = None
    capacity_wait: int | None = None
    worker_id: str | None = None
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    last_heartbeat: datetime | None = None
    progress: str | None = None
    percent: float | None = None
    cancel_requested: bool = False
    heartbeats: int = 0
    output: dict[str, Any] | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    idle_workers: int | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed attempt: the item, the run row as it now stands, and the
    lease token (shown to the worker once; only its hash is stored)."""

    item: WorkItem
    run: Run
    lease_token: str


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    """A renewed lease: until when, and whether a cancel was asked."""

    cancel_requested: bool
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class WorkerSeen:
    id: str
    last_seen: datetime
    held: int
    slots: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's figures: queued items (``depth``), held ones, how long the
    oldest claimable one has waited, and its workers."""

    namespace: str
    queue: str
    depth: int
    held: int
    oldest_wait_s: float | None
    workers: list[WorkerSeen] = field(default_factory=list)


@dataclass(slots=True)
class ExpiryReport:
    """What one expiry pass did, by what ended each item."""

    requeued: int = 0
    lost: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.requeued + self.lost + self.failed

    def count(self, reason: str, outcome: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if outcome == "requeued":
            self.requeued += 1
        elif outcome == "lost":
            self.lost += 1
        else:
            self.failed += 1
