"""Validation of job definitions: request JSON -> the normalised fields of a job.

Pure: no I/O, no Flask. Every error is a ``ValidationError`` whose ``field``
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

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cronman.api.workflow_validation import check_calendar_refs, check_depends_on
from cronman.callbacks import validate_dead_letter, validate_target
from cronman.errors import Conflict, ValidationError
from cronman.notify.rules import validate_job_notify
from cronman.schedules import Schedule, parse_schedule
from cronman.timeutil import ensure_utc, parse_rfc3339
from cronman.vocabulary import (
    CONCURRENCY_POLICIES,
    DEFAULT_CONCURRENCY,
    DEFAULT_DELIVERY,
    DEFAULT_NAMESPACE,
    DELIVERY_MODES,
    MISFIRE_POLICIES,
    TARGET_KINDS,
    default_misfire,
    default_retry,
)

DEFAULT_RETRY: dict[str, Any] = default_retry()
DEFAULT_MISFIRE: dict[str, Any] = default_misfire()

NAME_MAX = 256
NAMESPACE_MAX = 128
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
LABEL_KEY_MAX = 128
LABEL_VALUE_MAX = 256
LABELS_MAX = 64
MAX_ATTEMPTS_MAX = 100
BACKOFF_MAX = 86_400
GRACE_MAX = 7 * 86_400
JITTER_MAX = 86_400
PRIORITY_MIN = -1_000_000
PRIORITY_MAX = 1_000_000
TARGET_BODY_MAX = 64 * 1024
BULK_MAX = 1000
# Times a job may hold (schedule times, start_at, end_at): far from datetime's
# limits, so fire-time arithmetic cannot overflow, and 4-digit years.
TIME_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(9000, 1, 1, tzinfo=UTC)

DEFINITION_KEYS = (
    "name", "namespace", "schedule", "target", "retry", "misfire", "delivery",
    "concurrency", "priority", "start_at", "end_at", "jitter", "paused", "labels",
    "dead_letter", "notify", "depends_on", "calendars",
)
READ_ONLY_KEYS = ("id", "version", "created_at", "updated_at", "next_fire_at", "last_run")
REQUIRED_KEYS = ("name", "schedule", "target")
# Keys that may be null (meaning: not set).
NULLABLE_KEYS = ("start_at", "end_at", "jitter", "dead_letter", "notify", "depends_on",
                 "calendars")


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _prefixed(exc: ValidationError, prefix: str) -> ValidationError:
    return exc.prefixed(prefix) if prefix else exc


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


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
    if not isinstance(value, str):
        raise ValidationError(f"must be a string, not {type_name(value)}", field=field)
    if not value:
        raise ValidationError("must not be empty", field=field)
    if max_len is not None and len(value) > max_len:
        raise ValidationError(f"must be at most {max_len} characters", field=field)
    if pattern is not None and not pattern.match(value):
        raise ValidationError(f"invalid {what or 'value'} {value!r}", field=field)
    return value


def check_int(value: Any, field: str, *, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # 3.0 is accepted as 3: JSON does not tell integers from floats.
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise ValidationError(f"must be an integer, not {type_name(value)}", field=field)
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo} and {hi}", field=field)
    number: int = value
    return number


def check_number(value: Any, field: str, *, lo: float, hi: float) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"must be a number, not {type_name(value)}", field=field)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError("must be a finite number", field=field)
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo:g} and {hi:g}", field=field)
    return value


def check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"must be true or false, not {type_name(value)}", field=field)
    return value


def check_choice(value: Any, field: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValidationError(f"must be one of {', '.join(choices)}", field=field)
    return str.__str__(value)  # the plain string, never an enum member


def check_time(value: Any, field: str, *, bounded: bool = True) -> datetime:
    """An RFC 3339 time; ``bounded``: within [TIME_MIN, TIME_MAX)."""
    if not isinstance(value, str):
        raise ValidationError(
            f"must be an RFC 3339 string, not {type_name(value)}", field=field)
    try:
        t = parse_rfc3339(value)
    except (ValueError, OverflowError) as exc:
        raise ValidationError(f"invalid RFC 3339 time {value!r}: {exc}", field=field) from None
    if bounded and not TIME_MIN <= t < TIME_MAX:
        raise ValidationError(f"must be between {TIME_MIN.year} and {TIME_MAX.year - 1}",
                              field=field)
    return t


def check_namespace(value: Any, field: str = "namespace") -> str:
    return check_string(value, field, max_len=NAMESPACE_MAX, pattern=NAMESPACE_RE,
                        what="namespace (letters, digits, '.', '_', '-')")


def check_labels(value: Any, field: str) -> dict[str, str]:
    labels = require_object(value, field)
    if len(labels) > LABELS_MAX:
        raise ValidationError(f"at most {LABELS_MAX} labels", field=field)
    out: dict[str, str] = {}
    for key, val in labels.items():
        kfield = f"{field}.{key}"
        check_string(key, kfield, max_len=LABEL_KEY_MAX, pattern=LABEL_KEY_RE,
                     what="label key (letters, digits, '.', '_', '/', '-')")
        if not isinstance(val, str):
            raise ValidationError(f"must be a string, not {type_name(val)}", field=kfield)
        if len(val) > LABEL_VALUE_MAX:
            raise ValidationError(f"must be at most {LABEL_VALUE_MAX} characters", field=kfield)
        out[key] = val
    return out


def check_retry(value: Any, field: str) -> dict[str, Any]:
    obj = require_object(value, field)
    reject_unknown(obj, tuple(DEFAULT_RETRY), field)
    merged = {**DEFAULT_RETRY, **obj}
    out = {
        "max_attempts": check_int(merged["max_attempts"], f"{field}.max_attempts",
                                  lo=1, hi=MAX_ATTEMPTS_MAX),
        "min_backoff": check_number(merged["min_backoff"], f"{field}.min_backoff",
                                    lo=0, hi=BACKOFF_MAX),
        "max_backoff": check_number(merged["max_backoff"], f"{field}.max_backoff",
                                    lo=0, hi=BACKOFF_MAX),
    }
    if out["max_backoff"] < out["min_backoff"]:
        raise ValidationError("must not be less than min_backoff", field=f"{field}.max_backoff")
    return out


def check_misfire(value: Any, field: str) -> dict[str, Any]:
    obj = require_object(value, field)
    reject_unknown(obj, tuple(DEFAULT_MISFIRE), field)
    merged = {**DEFAULT_MISFIRE, **obj}
    return {
        "policy": check_choice(merged["policy"], f"{field}.policy", MISFIRE_POLICIES),
        "grace": check_number(merged["grace"], f"{field}.grace", lo=0, hi=GRACE_MAX),
    }


def check_target(value: Any, field: str, *, dead_letter: bool = False) -> dict[str, Any]:
    obj = require_object(value, field)
    body = obj.get("body")
    # The SPEC's 64 KiB cap on a target body, checked here as well so the API
    # answers it the same way whatever the target module does.
    if isinstance(body, str) and len(body.encode("utf-8", "surrogatepass")) > TARGET_BODY_MAX:
        raise ValidationError(f"must be at most {TARGET_BODY_MAX} bytes (64 KiB)",
                              field=f"{field}.body")
    try:
        if dead_letter:
            return validate_dead_letter(obj)
        return validate_target(obj, allowed_kinds=TARGET_KINDS)
    except ValidationError as exc:
        raise exc.prefixed(field) from None


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
    obj = require_object(spec, prefix or None)
    for key in obj:
        if key in READ_ONLY_KEYS:
            if not allow_read_only:
                raise ValidationError(f"{key!r} is read-only; it is assigned by the server",
                                      field=_path(prefix, key))
        elif key not in DEFINITION_KEYS:
            raise ValidationError(f"unknown key {key!r}", field=_path(prefix, str(key)))
    for key in REQUIRED_KEYS:
        if obj.get(key) is None:
            raise ValidationError("is required", field=_path(prefix, key))

    def get(key: str, default: Any) -> Any:
        value = obj.get(key, default)
        if value is None and key not in NULLABLE_KEYS:
            # null for an optional key with a default means "the default".
            return default
        return value

    out: dict[str, Any] = {}
    out["name"] = check_string(obj["name"], _path(prefix, "name"), max_len=NAME_MAX,
                               pattern=NAME_RE,
                               what="name (letters, digits and . _ : / @ + -)")
    out["namespace"] = check_namespace(get("namespace", DEFAULT_NAMESPACE),
                                       _path(prefix, "namespace"))

    sched_spec = require_object(obj["schedule"], _path(prefix, "schedule"))
    try:
        schedule = parse_schedule(sched_spec, job_id=job_id, created_at=created_at or now)
    except ValidationError as exc:
        raise exc.prefixed(_path(prefix, "schedule")) from None
    sched = schedule.to_dict()
    for key in ("at", "anchor"):
        if isinstance(sched.get(key), str) and isinstance(sched_spec.get(key), str):
            check_time(sched_spec[key], _path(prefix, f"schedule.{key}"))
    if sched.get("kind") == "once" and sched != previous_schedule:
        at = check_time(sched.get("at"), _path(prefix, "schedule.at"))
        if at < now:
            raise ValidationError("is in the past", field=_path(prefix, "schedule.at"))
    out["schedule"] = sched

    out["target"] = check_target(obj["target"], _path(prefix, "target"))
    out["retry"] = check_retry(get("retry", DEFAULT_RETRY), _path(prefix, "retry"))
    out["misfire"] = check_misfire(get("misfire", DEFAULT_MISFIRE), _path(prefix, "misfire"))
    out["delivery"] = check_choice(get("delivery", DEFAULT_DELIVERY),
                                   _path(prefix, "delivery"), DELIVERY_MODES)
    out["concurrency"] = check_choice(get("concurrency", DEFAULT_CONCURRENCY),
                                      _path(prefix, "concurrency"), CONCURRENCY_POLICIES)
    out["priority"] = check_int(get("priority", 0), _path(prefix, "priority"),
                                lo=PRIORITY_MIN, hi=PRIORITY_MAX)

    start_at = obj.get("start_at")
    end_at = obj.get("end_at")
    out["start_at"] = None if start_at is None else check_time(start_at,
                                                               _path(prefix, "start_at"))
    out["end_at"] = None if end_at is None else check_time(end_at, _path(prefix, "end_at"))
    if out["start_at"] and out["end_at"] and out["end_at"] <= out["start_at"]:
        raise ValidationError("must be later than start_at", field=_path(prefix, "end_at"))

    jitter = obj.get("jitter")
    out["jitter"] = None if jitter is None else check_number(
        jitter, _path(prefix, "jitter"), lo=0, hi=JITTER_MAX)
    out["paused"] = check_bool(get("paused", False), _path(prefix, "paused"))
    out["labels"] = check_labels(get("labels", {}), _path(prefix, "labels"))
    dead_letter = obj.get("dead_letter")
    out["dead_letter"] = None if dead_letter is None else check_target(
        dead_letter, _path(prefix, "dead_letter"), dead_letter=True)
    out["notify"] = validate_job_notify(obj.get("notify"), _path(prefix, "notify"))
    out["depends_on"] = check_depends_on(obj.get("depends_on"), _path(prefix, "depends_on"))
    out["calendars"] = check_calendar_refs(obj.get("calendars"), _path(prefix, "calendars"),
                                           out["namespace"])
    return out, schedule


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
