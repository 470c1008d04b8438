"""Validation of job definitions: request JSON -> the normalised fields of a job.

The definition is declared in :mod:`cronman.api.job_fields` (which gives the
OpenAPI schemas too); this module runs it, and holds the checks of the other
request bodies and query parameters. Pure: no I/O, no Flask. Every error is a ``ValidationError`` whose ``field``
is the dotted path of the offending value (``schedule.cron``, ``target.url``,
``jobs[1].schedule.timezone``).

Rules (the API documentation repeats them):

- Required: ``name``, ``schedule``, ``target``. Everything else has a default:
  ``namespace`` "default", ``retry`` {max_attempts 3, min_backoff 1,
  max_backoff 60}, ``misfire`` {policy fire_once, grace 300}, ``delivery``
  at_least_once, ``concurrency`` allow, ``priority`` 0, ``paused`` false,
  ``labels`` {}, ``start_at``/``end_at``/``jitter``/``dead_letter``/``notify``/
  ``depends_on``/``calendars`` null (``notify``: the job's notification
  rules, :mod:`cronman.notify.rules`; the workflow keys:
  :mod:`cronman.api.workflow_validation`).
  ``retry`` and ``misfire`` may be given in part; the rest take the defaults.
- Unknown keys are rejected at every level whose schema the API owns (the job
  object, ``retry``, ``misfire``); ``schedule`` and ``target`` are checked by
  their own modules, which reject unknown keys as well.
- Types are strict: a boolean is not a number, a number is not a string,
  non-finite numbers are refused.
- Read-only keys (``id``, ``version``, ``created_at``, ``updated_at``,
  ``next_fire_at``, ``last_run``) are refused in a new definition (POST). In
  a replacement (PUT/PATCH) they are accepted so that a client may send back
  what it read: ``id`` and ``created_at`` must match the stored job,
  ``version`` must be the stored version (else 409, someone changed the job in
  between), the others are ignored. That check is ``check_read_only``.
- A ``once`` schedule whose ``at`` lies in the past is refused when the
  schedule is new or changed (an unchanged past ``once`` schedule may be sent
  back by a PUT that only changes, say, labels).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronman.api.job_fields import (
    DEFINITION_KEYS as DEFINITION_KEYS,  # re-exported: what a job body holds
)
from cronman.api.job_fields import (
    JOB,
    JOB_SENT_BACK,
    NAMESPACE,
    READ_ONLY_KEYS,
    JobContext,
)
from cronman.api.job_fields import (
    REQUIRED_KEYS as REQUIRED_KEYS,
)
from cronman.errors import Conflict, ValidationError
from cronman.fieldspec import TIME_MAX as TIME_MAX
from cronman.fieldspec import TIME_MIN as TIME_MIN
from cronman.fieldspec import Bool, Field, Int, Str, Time
from cronman.fieldspec import type_name as type_name
from cronman.schedules import Schedule
from cronman.timeutil import ensure_utc

BULK_MAX = 1000
_TIME = Time(bounded=True)
_ANY_TIME = Time(bounded=False)
_BOOL = Bool()


def _at(field: Field, value: Any, path: str | None) -> Any:
    """``field.check(value)``, its errors placed at ``path``."""
    try:
        return field.check(value)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=field.join(path, exc.field) if path else
                              exc.field) from None


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def require_object(value: Any, field: str | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"must be an object, not {type_name(value)}", field=field)
    return value


def reject_unknown(obj: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ValidationError(f"unknown key {key!r}", field=_path(prefix, str(key)))


def check_string(value: Any, field: str, *, max_len: int | None = None,
                 pattern: re.Pattern[str] | None = None, what: str = "") -> str:
    """A non-empty string (at most ``max_len``, matching ``pattern``: ``invalid {what}``)."""
    spec = Str(min_len=1, max_len=max_len, pattern=None if pattern is None else pattern.pattern,
               pattern_message=f"invalid {what or 'value'} {{value!r}}")
    text: str = _at(spec, value, field)
    return text


def check_int(value: Any, field: str, *, lo: int, hi: int) -> int:
    number: int = _at(Int(lo=lo, hi=hi), value, field)
    return number


def check_bool(value: Any, field: str) -> bool:
    flag: bool = _at(_BOOL, value, field)
    return flag


def check_time(value: Any, field: str, *, bounded: bool = True) -> datetime:
    """An RFC 3339 time; ``bounded``: within [TIME_MIN, TIME_MAX)."""
    t: datetime = _at(_TIME if bounded else _ANY_TIME, value, field)
    return t


def check_namespace(value: Any, field: str = "namespace") -> str:
    namespace: str = _at(NAMESPACE, value, field)
    return namespace


def validate_job(spec: Any, **kwargs: Any) -> dict[str, Any]:
    """Validate one job definition; see ``validate_job_parsed`` for the arguments."""
    return validate_job_parsed(spec, **kwargs)[0]


def validate_job_parsed(
    spec: Any,
    *,
    job_id: str,
    now: datetime,
    created_at: datetime | None = None,
    previous_schedule: dict[str, Any] | None = None,
    allow_read_only: bool = False,
    prefix: str = "",
) -> tuple[dict[str, Any], Schedule]:
    """Validate one job definition: its normalised fields, and its parsed schedule.

    The result holds every key of ``DEFINITION_KEYS`` (the columns of a job
    other than id, version and times), defaults filled in. ``job_id`` and
    ``created_at`` (default ``now``) feed the schedule parser (hashed ``H``
    fields, the default interval anchor). ``previous_schedule`` is the stored
    normalised schedule of the job being replaced, if any. With
    ``allow_read_only`` read-only keys are skipped (the caller has checked them
    with ``check_read_only``); otherwise they are refused. ``prefix`` is put in
    front of every error field (``jobs[3]``).
    """
    ctx = JobContext(job_id=job_id, now=now, created_at=created_at or now,
                     previous_schedule=previous_schedule)
    try:
        out: dict[str, Any] = (JOB_SENT_BACK if allow_read_only else JOB).check(spec, ctx)
    except ValidationError as exc:
        raise exc.prefixed(prefix) if prefix else exc from None
    assert ctx.schedule is not None  # the schedule is required: checked or refused
    return out, ctx.schedule


def check_read_only(body: Mapping[str, Any], *, job_id: str, version: int,
                    created_at: datetime) -> None:
    """Read-only keys sent back in a PUT/PATCH must agree with the stored job.

    ``id`` and ``created_at`` must match (400); ``version`` must be the stored
    version, else ``Conflict`` (409): the job changed since the client read it.
    ``updated_at``, ``next_fire_at`` (times) and ``last_run`` (an object) are
    ignored, but must have the form the API gives them (400 otherwise).
    """
    if "id" in body and body["id"] != job_id:
        raise ValidationError("does not match the job id of the URL", field="id")
    if "created_at" in body and body["created_at"] is not None:
        if check_time(body["created_at"], "created_at", bounded=False) != ensure_utc(created_at):
            raise ValidationError("is read-only and does not match the stored job",
                                  field="created_at")
    for key in ("updated_at", "next_fire_at"):  # ignored, but only as the API wrote them
        if body.get(key) is not None:
            check_time(body[key], key, bounded=False)
    if body.get("last_run") is not None and not isinstance(body["last_run"], dict):
        raise ValidationError(f"must be an object or null, not {type_name(body['last_run'])}",
                              field="last_run")
    if "version" in body and body["version"] is not None:
        given = check_int(body["version"], "version", lo=0, hi=2**62)
        if given != version:
            raise Conflict(f"the job is at version {version}, not {given}: it changed "
                           "since it was read", field="version")


def strip_read_only(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in READ_ONLY_KEYS}


def validate_bulk(body: Any) -> list[Any]:
    """The ``jobs`` list of a bulk request (its items are validated one by one)."""
    obj = require_object(body, None)
    reject_unknown(obj, ("jobs",), "")
    jobs = obj.get("jobs")
    if jobs is None:
        raise ValidationError("is required", field="jobs")
    if not isinstance(jobs, list):
        raise ValidationError(f"must be an array, not {type_name(jobs)}", field="jobs")
    if not jobs:
        raise ValidationError("must hold at least one job", field="jobs")
    if len(jobs) > BULK_MAX:
        raise ValidationError(f"at most {BULK_MAX} jobs per request", field="jobs")
    return jobs


def validate_backfill(body: Any, *, now: datetime) -> tuple[datetime, datetime]:
    """``{"since", "until"}`` of a backfill; ``until`` is clamped to ``now``."""
    obj = require_object(body, None)
    reject_unknown(obj, ("since", "until"), "")
    for key in ("since", "until"):
        if obj.get(key) is None:
            raise ValidationError("is required", field=key)
    since = check_time(obj["since"], "since")
    until = min(check_time(obj["until"], "until"), now)
    if since >= until:
        raise ValidationError("must be earlier than until (and than now)", field="since")
    return since, until


def parse_label_filter(values: list[str]) -> tuple[tuple[str, str], ...]:
    """``label=key:value`` query parameters."""
    out = []
    for raw in values:
        key, sep, value = raw.partition(":")
        if not sep or not key:
            raise ValidationError(f"must be key:value, not {raw!r}", field="label")
        out.append((key, value))
    return tuple(out)


def parse_bool_param(raw: str, field: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValidationError(f"must be true or false, not {raw!r}", field=field)


def parse_int_param(raw: str | None, field: str, *, default: int, lo: int, hi: int) -> int:
    """An integer query parameter; absent: ``default`` (given but empty is an error)."""
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValidationError(f"must be an integer, not {raw!r}", field=field) from None
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo} and {hi}", field=field)
    return value


def parse_time_param(raw: str | None, field: str) -> datetime | None:
    if raw is None:
        return None
    return check_time(raw, field, bounded=False)
