"""Jobs and runs as API JSON, with secrets redacted (``cronman.redaction``)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronman.models import Job, Run
from cronman.notify.rules import redact_notify
from cronman.redaction import redact_target, redact_value
from cronman.schedules import JobTimes, Schedule, job_times
from cronman.schedules.calendars import reference_key as calendar_key
from cronman.timeutil import format_rfc3339, to_ms
from cronman.vocabulary import WorkState

if TYPE_CHECKING:  # the light client install has neither Flask nor SQLAlchemy
    from cronman.api.auth import Principal
    from cronman.store.base import Edge
    from cronman.store.records import AttemptOutcome
    from cronman.store.work_records import QueueStats, WorkItem

log = logging.getLogger(__name__)

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
        "notify": job.notify,
        "depends_on": job.depends_on,
        "calendars": job.calendars,
        "buffer_limit": job.buffer_limit,
        "pause_after_failures": job.pause_after_failures,
        "max_runs": job.max_runs,
    }


def job_state(job: Job) -> str:
    """``done`` (its ``max_runs`` reached), ``paused`` or ``active``."""
    if job.done_at is not None:
        return "done"
    return "paused" if job.paused else "active"


def policy_state(job: Job) -> dict[str, Any]:
    """What the service keeps for the job's policies, as the job shows it."""
    return {
        "state": job_state(job),
        "pause_reason": job.pause_reason,
        "pause_note": job.pause_note,
        "failure_streak": job.failure_streak,
        "runs_done": job.runs_done,
        "runs_left": None if job.max_runs is None else max(0, job.max_runs - job.runs_done),
        "done_at": format_rfc3339(job.done_at),
        "paused_at": format_rfc3339(job.paused_at),
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
             with_last_run: bool = False, schedule: Schedule | None = None,
             buffered: int | None = None) -> dict[str, Any]:
    """The job as API JSON; ``buffered`` (the fires its buffer holds) when counted."""
    out: dict[str, Any] = {"id": job.id, **job_definition(job)}
    out["target"] = redact_target(job.target)
    out["dead_letter"] = redact_target(job.dead_letter)
    out["notify"] = redact_notify(job.notify, redact_value)
    out["version"] = job.version
    out["created_at"] = format_rfc3339(job.created_at)
    out["updated_at"] = format_rfc3339(job.updated_at)
    out["next_fire_at"] = format_rfc3339(next_fire_at(job, now, schedule))
    out.update(policy_state(job))
    if buffered is not None:
        out["buffered"] = buffered
    if with_last_run:
        out["last_run"] = None if last_run is None else run_json(last_run)
    return out


def run_json(run: Run, work: WorkItem | None = None) -> dict[str, Any]:
    """A run as API JSON; ``work``: its item while it is with a work queue."""
    out = {
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
        "gate": run.gate,
    }
    if work is not None:
        out["worker"] = work_json(work)
    return out


def attempt_json(a: AttemptOutcome) -> dict[str, Any]:
    """An earlier attempt of a run (``earlier_attempts`` of one run's JSON)."""
    return {
        "attempt": a.attempt,
        "status": a.status,
        "node_id": a.node_id,
        "started_at": format_rfc3339(a.started_at),
        "finished_at": format_rfc3339(a.finished_at),
        "duration_ms": a.duration_ms,
        "result": a.result,
        "error": a.error,
    }


def work_json(item: WorkItem) -> dict[str, Any]:
    """Where a worker run stands with its queue (``worker`` of the run JSON)."""
    return {
        "queue": item.queue,
        "state": item.state,
        "worker_id": item.worker_id,
        "claimed_at": format_rfc3339(item.claimed_at),
        "last_heartbeat": format_rfc3339(item.last_heartbeat),
        "lease_expires_at": format_rfc3339(item.lease_expires_at),
        "progress": item.progress,
        "percent": item.percent,
        "heartbeats": item.heartbeats,
        "output": item.output,
        "cancel_requested": item.cancel_requested,
        "waiting_for": capacity_wait_text(item),
    }


def capacity_wait_text(item: WorkItem) -> str | None:
    """Why a queued run is not claimed yet, when its job asks for room first."""
    if item.state != WorkState.WAITING_CAPACITY or item.capacity_idle is None:
        return None
    return (f"capacity on queue {item.queue}: {item.idle_workers or 0} of "
            f"{item.capacity_idle} idle")


def queue_json(q: QueueStats) -> dict[str, Any]:
    """A work queue's figures (``GET /v1/queues``, ``/v1/cluster``)."""
    return {
        "namespace": q.namespace,
        "queue": q.queue,
        "depth": q.depth,
        "held": q.held,
        "oldest_wait_s": None if q.oldest_wait_s is None else round(q.oldest_wait_s, 3),
        "workers": [{"id": w.id, "last_seen": format_rfc3339(w.last_seen), "held": w.held,
                     "slots": w.slots} for w in q.workers],
    }


def edges_json(edges: list[Edge], who: Principal) -> list[dict[str, Any]]:
    """A job's upstream or downstream jobs as API JSON: namespace and name
    only where the caller's token reaches."""
    out = []
    for e in edges:
        seen = e.namespace is not None and who.allows(e.namespace)
        out.append({"job_id": e.job_id, "kind": e.kind,
                    "namespace": e.namespace if seen else None,
                    "name": e.name if seen else None, "deleted": e.deleted})
    return out


def excluded_fire_times(store: Any, job: Job, times: list[datetime]
                        ) -> list[tuple[datetime, str]]:
    """Which of ``times`` the job's exclusion calendars skip, and by which."""
    if not job.calendars or not times:
        return []
    found = []
    for ref in job.calendars:
        namespace, name = calendar_key(ref, job.namespace)
        record = store.calendars.get_by_name(namespace, name)
        if record is not None:
            found.append((ref, record.calendar()))
    out = []
    for t in times:
        ms = to_ms(t)
        by = next((ref for ref, c in found if c.excludes(ms)), None)
        if by is not None:
            out.append((t, by))
    return out
