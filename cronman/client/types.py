"""The API's JSON, typed: what the client sends and what it gets back.

``TypedDict`` rather than classes: the wire format is the contract (SPEC
§3-§5), a job read with ``get_job`` can be sent back with ``replace_job`` as
it is, and the CLI prints the API's JSON unchanged. ``schedule`` and
``target`` stay plain mappings: their keys depend on their ``kind``.
Times are RFC 3339 strings in UTC, as the API writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, NotRequired, TypedDict, TypeVar


class JobSpec(TypedDict, total=False):
    """A job definition as ``POST /v1/jobs`` takes it; only name, schedule, target are required."""

    name: str
    namespace: str
    schedule: dict[str, Any]
    target: dict[str, Any]
    retry: dict[str, Any]
    misfire: dict[str, Any]
    delivery: str
    concurrency: str
    priority: int
    start_at: str | None
    end_at: str | None
    jitter: float | None
    paused: bool
    labels: dict[str, str]
    dead_letter: dict[str, Any] | None
    notify: list[dict[str, Any]] | None
    depends_on: list[dict[str, Any]] | None
    calendars: list[str] | None
    buffer_limit: int | None
    pause_after_failures: int | None
    max_runs: int | None


class Run(TypedDict):
    """One run (SPEC §4)."""

    id: str
    job_id: str
    scheduled_for: str
    status: str
    attempt: int
    origin: str
    node_id: str | None
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    next_attempt_at: str | None
    lateness_ms: int | None
    duration_ms: int | None
    skipped_before: int | None
    result: dict[str, Any] | None
    error: str | None
    gate: NotRequired[dict[str, Any] | None]
    # A worker target's run, while it is with its work queue.
    worker: NotRequired[WorkState]


class WorkState(TypedDict):
    """Where a worker run stands with its queue (``worker`` of a run)."""

    queue: str
    state: str  # queued, held, waiting_capacity
    worker_id: str | None
    claimed_at: str | None
    last_heartbeat: str | None
    lease_expires_at: str | None
    progress: str | None
    percent: float | None
    cancel_requested: bool
    # While ``state`` is waiting_capacity: "capacity on queue Q: I of N idle".
    waiting_for: NotRequired[str | None]


class QueueWorker(TypedDict):
    id: str
    last_seen: str
    held: int
    slots: int


class Queue(TypedDict):
    """``GET /v1/queues``: one work queue's figures."""

    namespace: str
    queue: str
    depth: int
    held: int
    oldest_wait_s: float | None
    workers: list[QueueWorker]


class RunItem(Run):
    """A run of ``GET /v1/runs`` (across jobs): a run with its job's name and
    namespace (None when the job row is gone)."""

    job_name: str | None
    namespace: str | None


class Job(TypedDict):
    """A stored job: its definition (secrets redacted) plus what the server assigns."""

    id: str
    name: str
    namespace: str
    schedule: dict[str, Any]
    target: dict[str, Any]
    retry: dict[str, Any]
    misfire: dict[str, Any]
    delivery: str
    concurrency: str
    priority: int
    start_at: str | None
    end_at: str | None
    jitter: float | None
    paused: bool
    labels: dict[str, str]
    dead_letter: dict[str, Any] | None
    notify: NotRequired[list[dict[str, Any]] | None]
    depends_on: NotRequired[list[dict[str, Any]] | None]
    calendars: NotRequired[list[str] | None]
    buffer_limit: NotRequired[int | None]
    pause_after_failures: NotRequired[int | None]
    max_runs: NotRequired[int | None]
    # What the server keeps for the policies: "active", "paused" or "done";
    # why the job paused itself, the note of its last pause or resume; failed
    # runs in a row, runs ended, runs left (null: no max_runs); the fires its
    # buffer holds (``get_job`` only).
    state: NotRequired[str]
    pause_reason: NotRequired[str | None]
    pause_note: NotRequired[str | None]
    failure_streak: NotRequired[int]
    runs_done: NotRequired[int]
    runs_left: NotRequired[int | None]
    done_at: NotRequired[str | None]
    paused_at: NotRequired[str | None]
    buffered: NotRequired[int]
    version: int
    created_at: str
    updated_at: str
    next_fire_at: str | None
    last_run: NotRequired[Run | None]


class Backfill(TypedDict):
    """The answer of ``POST /v1/jobs/{id}/backfill``."""

    requested: int
    fire_times: int


class Actor(TypedDict):
    token_id: str | None
    name: str


class HistoryEntry(TypedDict):
    """One recorded change of a job (``GET /v1/jobs/{id}/history``)."""

    id: str
    job_id: str
    namespace: str
    job_name: str
    action: str
    job_version: int
    actor: Actor
    request_id: str | None
    at: str
    changed: list[str]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    details: dict[str, Any] | None


class Claim(TypedDict):
    """A run taken from a work queue (``POST /v1/queues/{queue}/claim``): held under
    ``lease_token`` while heartbeats come within ``heartbeat_timeout`` seconds,
    ended by ``deadline_at`` (``timeout`` seconds) whatever its heartbeats."""

    run: Run
    payload: Any
    attempt: int
    lease_token: str
    heartbeat_timeout: float
    timeout: float
    deadline_at: str
    # The W3C trace context the run was handed over with (None: tracing is off).
    traceparent: NotRequired[str | None]
    tracestate: NotRequired[str | None]


class Heartbeat(TypedDict):
    """The answer of ``POST /v1/runs/{id}/heartbeat``: the lease renewed."""

    cancel_requested: bool
    lease_expires_at: NotRequired[str | None]


class Node(TypedDict, total=False):
    id: str
    address: str
    started_at: str | None
    last_heartbeat: str | None
    heartbeat_age_s: float | None
    owned_jobs: int
    fires_last_minute: int
    lock_wins: int
    lock_losses: int


class Cluster(TypedDict):
    """``GET /v1/cluster``: scheduler nodes and worker agents."""

    replicas: int
    nodes: list[Node]
    agents: list[dict[str, Any]]
    queues: NotRequired[list[Queue] | None]


class Readiness(TypedDict, total=False):
    """``GET /readyz``: ``status`` is "ready" or "unavailable"; ``checks`` per dependency."""

    status: str
    checks: dict[str, str]
    error: dict[str, Any]


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list answer; pass ``next_cursor`` back for the next (None: the last)."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None


def follow_pages(fetch: Callable[[str | None], Page[T]]) -> Iterator[T]:
    """Every item of every page ``fetch(cursor)`` answers, following ``next_cursor``."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        cursor = page.next_cursor
        if not cursor:
            return
