"""Jobs and runs as API JSON, with secrets redacted.

Secrets never leave the API in full: every value of a target's (and a dead
letter target's, and a notification webhook's) ``headers`` and of a
container target's ``env`` is shown
redacted -- the first 4 characters and "…" for values longer than 8
characters, "***" otherwise. Headers known to carry no secret
(``PUBLIC_HEADERS``: ``Content-Type``, ``Accept``...) are shown in full;
every other header is taken for a secret (fail closed).

Because a client may PUT back what it read, ``restore_redacted`` puts the
stored value back where a request carries exactly the redacted form of it --
but only while the target keeps its destination (``destination``: scheme,
host and port of an http URL; queue and endpoint of an sqs target; image and
command of a container, which could print its env). A stored secret never
follows a changed destination: there a redacted value is refused (400 naming
it) and must be given again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cronman.errors import ValidationError
from cronman.models import Job, Run
from cronman.notify.rules import redact_notify
from cronman.schedules import JobTimes, Schedule, job_times
from cronman.schedules.calendars import reference_key as calendar_key
from cronman.timeutil import format_rfc3339, to_ms

if TYPE_CHECKING:  # the light client install has neither Flask nor SQLAlchemy
    from cronman.api.auth import Principal
    from cronman.store.base import Edge

log = logging.getLogger(__name__)

REDACTED_SHORT = "***"
REDACTED_KEEP = 4
REDACTED_MIN_LEN = 8
# The maps inside a target whose values are secrets.
SECRET_MAPS = ("headers", "env")
# Headers shown in full (lower case): they describe the request, they hold no secret.
PUBLIC_HEADERS = frozenset({
    "accept", "accept-charset", "accept-encoding", "accept-language", "cache-control",
    "content-encoding", "content-language", "content-type", "user-agent",
})
DEFAULT_PORTS = {"http": 80, "https": 443}


def redact_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if len(text) > REDACTED_MIN_LEN:
        return text[:REDACTED_KEEP] + "…"
    return REDACTED_SHORT


def is_secret(map_name: str, key: Any) -> bool:
    """Whether the value under ``key`` of a target's ``map_name`` map is redacted."""
    return not (map_name == "headers" and isinstance(key, str)
                and key.lower() in PUBLIC_HEADERS)


def redact_target(target: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if target is None:
        return None
    out = dict(target)
    for key in SECRET_MAPS:
        values = out.get(key)
        if isinstance(values, Mapping):
            out[key] = {k: redact_value(v) if is_secret(key, k) else v
                        for k, v in values.items()}
    return out


def destination(target: Mapping[str, Any]) -> tuple[Any, ...]:
    """Where a target's secrets go: what must not change for them to stay."""
    kind = target.get("kind")
    if kind == "http":
        return (kind, _url_destination(target.get("url")))
    if kind == "sqs":
        return (kind, _url_destination(target.get("queue_url")),
                _url_destination(target.get("endpoint_url")), target.get("region"))
    command = target.get("command")
    return (kind, target.get("image"),
            tuple(command) if isinstance(command, list) else command)


def _url_destination(url: Any) -> tuple[Any, ...] | None:
    """(scheme, host, port) of a URL; the URL itself when it does not parse."""
    if url is None:
        return None
    if not isinstance(url, str):
        return ("?", repr(url))
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        return (scheme, (parts.hostname or "").rstrip("."),
                parts.port or DEFAULT_PORTS.get(scheme))
    except ValueError:
        return ("?", url)


def restore_redacted(given: Any, stored: Mapping[str, Any] | None, field: str = "target") -> Any:
    """``given`` (a target from a request) with redacted secrets restored.

    A value equal to the redacted form of the stored value under the same key
    (header names compared case-insensitively) is replaced by the stored one,
    if the target keeps its ``destination``; if the destination changed, such
    a value is a ``ValidationError`` naming it (``field`` is the target's
    path: ``target``, ``dead_letter``). Anything else -- a new value, a new
    key -- is taken as sent.
    """
    if not isinstance(given, dict) or not isinstance(stored, Mapping):
        return given
    moved = destination(given) != destination(stored)
    out = dict(given)
    for key in SECRET_MAPS:
        new, old = out.get(key), stored.get(key)
        if not isinstance(new, dict) or not isinstance(old, Mapping):
            continue
        fold = key == "headers"
        old_by_key = {(k.lower() if fold else k): v for k, v in old.items()}
        restored = {}
        refused: list[str] = []
        for k, v in new.items():
            prev = old_by_key.get(k.lower() if fold and isinstance(k, str) else k)
            if (prev is not None and isinstance(v, str) and v != prev and is_secret(key, k)
                    and v == redact_value(prev)):
                refused.append(str(k))
                v = prev
            restored[k] = v
        if moved and refused:
            refused.sort(key=str.lower)
            raise ValidationError(
                f"is the redacted form of a stored secret, and the {field}'s destination "
                f"changed: give the value again (a stored secret is never sent to a new "
                f"destination; redacted here: {', '.join(refused)})",
                field=f"{field}.{key}.{refused[0]}")
        out[key] = restored
    return out


def restore_redacted_notify(given: Any, stored: list[dict[str, Any]] | None) -> Any:
    """A ``notify`` list from a request with the webhook header values it
    carries redacted put back from the stored rule at the same place."""
    if not isinstance(given, list) or not stored:
        return given
    out = []
    for i, rule in enumerate(given):
        old = stored[i] if i < len(stored) else None
        if isinstance(rule, dict) and isinstance(old, Mapping):
            rule = {**rule, "channel": restore_redacted(rule.get("channel"), old.get("channel"))}
        out.append(rule)
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
        "notify": job.notify,
        "depends_on": job.depends_on,
        "calendars": job.calendars,
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
    out["notify"] = redact_notify(job.notify, redact_value)
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
        "gate": run.gate,
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
