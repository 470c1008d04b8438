"""The records the job table keeps per owned job: compact, shared where they can be."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronman.scheduler import policies
from cronman.schedules.window import Times


class Common:
    """The parts of a job definition many jobs share (interned per table)."""

    __slots__ = ("namespace", "retry", "misfire", "delivery", "concurrency",
                 "start_at", "end_at", "jitter", "dead_letter", "policy", "grace_ms",
                 "depends_on", "calendars", "buffer_limit", "pause_after_failures", "max_runs")

    def __init__(self, namespace: str, retry: dict[str, Any], misfire: dict[str, Any],
                 delivery: str, concurrency: str, start_at: datetime | None,
                 end_at: datetime | None, jitter: float | None,
                 dead_letter: dict[str, Any] | None,
                 depends_on: list[dict[str, Any]] | None = None,
                 calendars: list[str] | None = None, buffer_limit: int | None = None,
                 pause_after_failures: int | None = None,
                 max_runs: int | None = None) -> None:
        self.namespace = namespace
        self.retry = retry
        self.misfire = misfire
        self.delivery = delivery
        self.concurrency = concurrency
        self.start_at = start_at
        self.end_at = end_at
        self.jitter = jitter
        self.dead_letter = dead_letter
        self.depends_on = depends_on  # the gates of a fire (cronman.scheduler.dispatch.gates)
        self.calendars = calendars
        # The policies of the dispatch's buffers and of the store's counts.
        self.buffer_limit = buffer_limit
        self.pause_after_failures = pause_after_failures
        self.max_runs = max_runs
        self.policy, self.grace_ms = policies.misfire_settings(misfire)


class JobState:
    """One owned job: what timing and dispatch need, and nothing more.

    The definition is kept compact -- the fields shared with other jobs sit
    in an interned :class:`Common`, the target as its JSON text (interned
    too), the schedule only parsed (jobs with the same times share one
    JobTimes) -- and ``JobTable.job`` rebuilds a :class:`Job` when a fire
    needs one.
    """

    __slots__ = ("id", "name", "version", "priority", "paused", "common",
                 "target", "times", "hash", "cursor_ms", "skipped_pending", "primary", "view")

    def __init__(self, job_id: str, name: str, version: int, priority: int, paused: bool,
                 common: Common, target: str, times: Times, h: int,
                 skipped_pending: int) -> None:
        self.id = job_id
        self.name = name
        self.version = version
        self.priority = priority
        self.paused = paused
        self.common = common
        self.target = target
        self.times = times
        self.hash = h
        self.cursor_ms: int | None = None  # the latest fire time handled (claimed or skipped)
        self.skipped_pending = skipped_pending
        # The job's first owner when it is another node (None: this one), as
        # of the table's membership view number ``view``.
        self.primary: str | None = None
        self.view = -1

    def __lt__(self, other: JobState) -> bool:
        # Heap entries of one job tie up to their state (a stale and a fresh
        # entry for the same fire): any consistent order will do.
        return id(self) < id(other)

    @property
    def policy(self) -> str:
        return self.common.policy

    @property
    def grace_ms(self) -> int:
        return self.common.grace_ms

class Prepared:
    """A job's state built ahead of a gain, with what admitting it needs."""

    __slots__ = ("state", "created_at")

    def __init__(self, state: JobState, created_at: datetime) -> None:
        self.state = state
        self.created_at = created_at
