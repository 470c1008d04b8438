"""Checks a scheduled fire passes right before its first attempt (no I/O).

- **Still wanted**: its job may have been deleted, paused or changed since
  the fire was claimed (a change that keeps this fire time fires with the new
  definition).
- **Concurrency** (SPEC §3): ``forbid`` skips the fire while an earlier run
  of the job is in flight; ``replace`` stops those runs first.

Each check answers an ``Admission``; the dispatcher carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from cronman.models import Job, Run
from cronman.scheduler import policies
from cronman.scheduler.fires import ActiveRun
from cronman.schedules import job_times
from cronman.vocabulary import ConcurrencyPolicy, RunOrigin


class HeldJobs(Protocol):
    """What the node answers about a job right before a dispatch (the job
    table): cheap questions first, the full definition only when it changed."""

    def held_version(self, job_id: str) -> tuple[int, bool] | None:
        """(version, paused) of the job as held here, or None if not held."""

    def is_deleted(self, job_id: str) -> bool:
        """Whether the job was deleted (a tombstone seen here)."""

    def held_job(self, job_id: str) -> Job | None:
        """The job as held here, as a :class:`Job`."""


@dataclass(frozen=True, slots=True)
class Admission:
    """Go (with ``job``, the definition to fire with, when it changed), or
    skip with ``error``; ``replace`` lists local runs to stop first,
    ``replace_remote`` runs of other nodes to end."""

    go: bool
    error: str | None = None
    job: Job | None = None
    replace: tuple[ActiveRun, ...] = ()
    replace_remote: tuple[Run, ...] = ()


GO = Admission(True)


def still_wanted(ar: ActiveRun, jobs: HeldJobs) -> Admission:
    """Is the fire's job still there, active and unchanged (or changed in a
    way that keeps this fire time)?"""
    job_id = ar.job.id
    if jobs.is_deleted(job_id):
        return Admission(False, "job deleted before the run started")
    held = jobs.held_version(job_id)
    if held is None:
        return GO  # no longer owned here: the claim still holds, fire it
    version, paused = held
    if paused:
        return Admission(False, "job paused before the run started")
    if version != ar.job.version:
        job = jobs.held_job(job_id)
        if job is None:
            return GO
        if ar.origin == RunOrigin.UPSTREAM:
            return Admission(True, job=job)  # made by a trigger: no fire time to keep
        if not _still_a_fire_time(job, ar.scheduled_for):
            return Admission(False, "job changed before the run started: this fire time is "
                                    "no longer in its schedule")
        return Admission(True, job=job)
    return GO


def concurrency(ar: ActiveRun, local: Sequence[ActiveRun], remote: Sequence[Run]) -> Admission:
    """The job's concurrency policy against its runs in flight: ``local``
    (held here, started) and ``remote`` (held by other nodes)."""
    if ar.job.concurrency == ConcurrencyPolicy.ALLOW:
        return GO
    decision = policies.decide_concurrency(ar.job.concurrency,
                                           [r.run_id for r in local] + [r.id for r in remote])
    if decision.action == "skip":
        return Admission(False, decision.error)
    if decision.action == "replace":
        return Admission(True, replace=tuple(local), replace_remote=tuple(remote))
    return GO


def _still_a_fire_time(job: Job, t: datetime) -> bool:
    try:
        return job_times(job).next_fire_after(t - timedelta(microseconds=1)) == t
    except Exception:
        return False
