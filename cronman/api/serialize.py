"""Jobs and runs as API JSON, with secrets redacted.

Secrets never leave the API in full: every value of a target's (and a dead
letter target's) ``headers`` and of a container target's ``env`` is shown
redacted -- the first 4 characters and "…" for values longer than 8
characters, "***" otherwise. Because a client may PUT back what it read,
``restore_redacted`` puts the stored value back where a request carries
exactly the redacted form of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronman.models import Job, Run
from cronman.schedules import JobTimes, Schedule, job_times
from cronman.timeutil import format_rfc3339

log = logging.getLogger(__name__)

REDACTED_SHORT = "***"
REDACTED_KEEP = 4
REDACTED_MIN_LEN = 8
# The maps inside a target whose values are secrets.
SECRET_MAPS = ("headers", "env")


def redact_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if len(text) > REDACTED_MIN_LEN:
        return text[:REDACTED_KEEP] + "…"
    return REDACTED_SHORT


def redact_target(target: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if target is None:
        return None
    out = dict(target)
    for key in SECRET_MAPS:
        values = out.get(key)
        if isinstance(values, Mapping):
            out[key] = {k: redact_value(v) for k, v in values.items()}
    return out


def restore_redacted(given: Any, stored: Mapping[str, Any] | None) -> Any:
    """``given`` (a target from a request) with redacted secrets restored.

    A value equal to the redacted form of the stored value under the same key
    (header names compared case-insensitively) is replaced by the stored one.
    Anything else -- a new value, a new key -- is taken as sent.
    """
    if not isinstance(given, dict) or not isinstance(stored, Mapping):
        return given
    out = dict(given)
    for key in SECRET_MAPS:
        new, old = out.get(key), stored.get(key)
        if not isinstance(new, dict) or not isinstance(old, Mapping):
            continue
        fold = key == "headers"
        old_by_key = {(k.lower() if fold else k): v for k, v in old.items()}
        restored = {}
        for k, v in new.items():
            prev = old_by_key.get(k.lower() if fold and isinstance(k, str) else k)
            if prev is not None and isinstance(v, str) and v != prev and v == redact_value(prev):
                v = prev
            restored[k] = v
        out[key] = restored
    return out


def job_definition(job: Job) -> dict[str, Any]:
    """The stored definition of a job as request JSON (unredacted; internal)."""
    return {
        "name": job.name,
        "namespace": job.namespace,
        "schedule": job.schedule,
        "target": job.target,
        "retry": job.retry,
        "misfire": job.misfire,
        "delivery": job.delivery,
        "concurrency": job.concurrency,
        "priority": job.priority,
        "start_at": format_rfc3339(job.start_at),
        "end_at": format_rfc3339(job.end_at),
        "jitter": job.jitter,
        "paused": job.paused,
        "labels": job.labels,
        "dead_letter": job.dead_letter,
    }


def next_fire_at(job: Job, now: datetime, schedule: Schedule | None = None) -> datetime | None:
    """The job's next fire time after ``now``; None when paused or when it has none.

    ``schedule``, the job's schedule already parsed (a write just validated it),
    spares parsing it again.
    """
    if job.paused:
        return None
    try:
        if schedule is not None:
            times = JobTimes(schedule, job_id=job.id, start_at=job.start_at, end_at=job.end_at,
                             jitter=job.jitter)
        else:
            times = job_times(job)
        return times.next_fire_after(now)
    except Exception:  # a stored schedule the current code cannot read
        log.exception("cannot compute the next fire time of job %s", job.id)
        return None


def job_json(job: Job, *, now: datetime, last_run: Run | None = None,
             with_last_run: bool = False, schedule: Schedule | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": job.id, **job_definition(job)}
    out["target"] = redact_target(job.target)
    out["dead_letter"] = redact_target(job.dead_letter)
    out["version"] = job.version
    out["created_at"] = format_rfc3339(job.created_at)
    out["updated_at"] = format_rfc3339(job.updated_at)
    out["next_fire_at"] = format_rfc3339(next_fire_at(job, now, schedule))
    if with_last_run:
        out["last_run"] = None if last_run is None else run_json(last_run)
    return out


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "job_id": run.job_id,
        "scheduled_for": format_rfc3339(run.scheduled_for),
        "status": run.status,
        "attempt": run.attempt,
        "origin": run.origin,
        "node_id": run.node_id,
        "claimed_at": format_rfc3339(run.claimed_at),
        "started_at": format_rfc3339(run.started_at),
        "finished_at": format_rfc3339(run.finished_at),
        "next_attempt_at": format_rfc3339(run.next_attempt_at),
        "lateness_ms": run.lateness_ms,
        "duration_ms": run.duration_ms,
        "skipped_before": run.skipped_before,
        "result": run.result,
        "error": run.error,
    }
