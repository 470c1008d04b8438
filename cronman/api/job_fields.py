"""The job definition, declared once: :data:`JOB` validates a definition
(``cronman.api.validation``) and gives the OpenAPI schemas
(``cronman.api.openapi.schemas``): ``JobCreate``, ``Retry``, ``Misfire``, the
targets (declared in ``cronman.callbacks.target_fields``).

The schedule, notify and workflow keys are ``Custom`` fields: their own
modules parse them and state their schemas. Cross-field rules (``end_at``
after ``start_at``, ``max_backoff`` at least ``min_backoff``, a new ``once``
in the future) are ``after`` checks and code, listed in ``SEMANTIC_RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronman.api.names import (
    LABEL_KEY_MAX,
    LABEL_KEY_RE,
    LABEL_VALUE_MAX,
    LABELS_MAX,
    NAME_MAX,
    NAME_RE,
    NAMESPACE_MAX,
    NAMESPACE_RE,
)
from cronman.api.workflow_validation import check_calendar_refs, check_depends_on
from cronman.callbacks.target_fields import DEAD_LETTER, MAX_HTTP_BODY_BYTES, NO_NUL, TARGET
from cronman.errors import ValidationError
from cronman.fieldspec import (
    REF,
    Bool,
    Choice,
    Custom,
    Int,
    MapOf,
    Num,
    Obj,
    Schema,
    Str,
    Time,
    type_name,
)
from cronman.notify.rules import validate_job_notify
from cronman.schedules import Schedule, parse_schedule
from cronman.vocabulary import (
    BUFFER_LIMIT_MAX,
    CONCURRENCY_POLICIES,
    DEFAULT_BUFFER_LIMIT,
    DEFAULT_CONCURRENCY,
    DEFAULT_DELIVERY,
    DEFAULT_NAMESPACE,
    DELIVERY_MODES,
    MAX_RUNS_MAX,
    MISFIRE_POLICIES,
    PAUSE_AFTER_FAILURES_MAX,
    default_misfire,
    default_retry,
)

DEFAULT_RETRY: dict[str, Any] = default_retry()
DEFAULT_MISFIRE: dict[str, Any] = default_misfire()

MAX_ATTEMPTS_MAX = 100
BACKOFF_MAX = 86_400
GRACE_MAX = 7 * 86_400
JITTER_MAX = 86_400
PRIORITY_MIN = -1_000_000
PRIORITY_MAX = 1_000_000
TARGET_BODY_MAX = MAX_HTTP_BODY_BYTES
# What the service keeps for a job's policies (cronman.store.run_policies,
# the dispatch's buffers): shown with the job, never written by a client.
POLICY_STATE_KEYS = ("state", "pause_reason", "pause_note", "failure_streak", "runs_done",
                     "runs_left", "done_at", "paused_at", "buffered")
READ_ONLY_KEYS = ("id", "version", "created_at", "updated_at", "next_fire_at", "last_run",
                  *POLICY_STATE_KEYS)


@dataclass(slots=True)
class JobContext:
    """What checking a definition needs beyond it (see ``validate_job_parsed``)."""

    job_id: str
    now: datetime
    created_at: datetime
    previous_schedule: dict[str, Any] | None = None
    schedule: Schedule | None = None  # set by the check: the parsed schedule


def _name(what: str, **kw: Any) -> Str:
    return Str(min_len=1, pattern_message=f"invalid {what} {{value!r}}", **kw)


NAME = _name("name (letters, digits and . _ : / @ + -)", max_len=NAME_MAX,
             pattern=NAME_RE.pattern, required=True)
NAMESPACE = _name("namespace (letters, digits, '.', '_', '-')", max_len=NAMESPACE_MAX,
                  pattern=NAMESPACE_RE.pattern)
JOB_TIME = Time(bounded=True)


def _backoffs_ordered(out: dict[str, Any]) -> None:
    if out["max_backoff"] < out["min_backoff"]:
        raise ValidationError("must not be less than min_backoff", field="max_backoff")


def _seconds(hi: int, **kw: Any) -> Num:
    return Num(lo=0, hi=hi, **kw)


RETRY = Obj({
    "max_attempts": Int(lo=1, hi=MAX_ATTEMPTS_MAX, default=DEFAULT_RETRY["max_attempts"]),
    "min_backoff": _seconds(BACKOFF_MAX, default=DEFAULT_RETRY["min_backoff"]),
    "max_backoff": _seconds(BACKOFF_MAX, default=DEFAULT_RETRY["max_backoff"]),
}, name="Retry", after={"max_backoff": _backoffs_ordered})
MISFIRE = Obj({
    "policy": Choice(MISFIRE_POLICIES, default=DEFAULT_MISFIRE["policy"]),
    "grace": _seconds(GRACE_MAX, default=DEFAULT_MISFIRE["grace"]),
}, name="Misfire")
LABELS = MapOf(
    _name("label key (letters, digits, '.', '_', '/', '-')", max_len=LABEL_KEY_MAX,
          pattern=LABEL_KEY_RE.pattern),
    Str(max_len=LABEL_VALUE_MAX, extra=NO_NUL),
    max_items=LABELS_MAX, count_message="at most {max} labels", nullable=True, default={})


def _schedule(value: Any, key: str, out: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"must be an object, not {type_name(value)}", field=key)
    try:
        schedule = parse_schedule(value, job_id=ctx.job_id, created_at=ctx.created_at)
    except ValidationError as exc:
        raise exc.prefixed(key) from None
    sched = schedule.to_dict()
    for name in ("at", "anchor"):
        if isinstance(sched.get(name), str) and isinstance(value.get(name), str):
            _time(value[name], f"{key}.{name}")
    if sched.get("kind") == "once" and sched != ctx.previous_schedule:
        if _time(sched.get("at"), f"{key}.at") < ctx.now:
            raise ValidationError("is in the past", field=f"{key}.at")
    ctx.schedule = schedule
    return sched


def _time(value: Any, field: str) -> datetime:
    try:
        at: datetime = JOB_TIME.check(value)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=field) from None
    return at


def check_target(value: Any, field: str, *, dead_letter: bool = False) -> dict[str, Any]:
    """A job's ``target`` (or ``dead_letter``) at ``field``, normalised."""
    if not isinstance(value, dict):
        raise ValidationError(f"must be an object, not {type_name(value)}", field=field)
    body = value.get("body")
    # The SPEC's 64 KiB cap on a target body, checked here as well so the API
    # answers it the same way whatever the target module does.
    if isinstance(body, str) and len(body.encode("utf-8", "surrogatepass")) > TARGET_BODY_MAX:
        raise ValidationError(f"must be at most {TARGET_BODY_MAX} bytes (64 KiB)",
                              field=f"{field}.body")
    try:
        out: dict[str, Any] = (DEAD_LETTER if dead_letter else TARGET).check(value)
    except ValidationError as exc:
        raise exc.prefixed(field) from None
    return out


def _end_after_start(out: dict[str, Any]) -> None:
    if out["start_at"] and out["end_at"] and out["end_at"] <= out["start_at"]:
        raise ValidationError("must be later than start_at", field="end_at")


def _ref(name: str, *, nullable: bool = False) -> Schema:
    schema: Schema = {"$ref": REF + name}
    return {"anyOf": [schema, {"type": "null"}]} if nullable else schema


def _notify_schema() -> Schema:
    # Imported here: the notify OpenAPI module reads this package's constants.
    from cronman.api.openapi.notifications import job_notify_schema

    return job_notify_schema()


def _workflow_schema(key: str) -> Schema:
    from cronman.api.openapi.workflows import definition_props

    schema: Schema = definition_props()[key]
    return schema


JOB = Obj({
    "name": NAME,
    "namespace": NAMESPACE.but(nullable=True, default=DEFAULT_NAMESPACE),
    "schedule": Custom(_schedule, _ref("Schedule"), required=True),
    "target": Custom(lambda v, k, o, c: check_target(v, k), _ref("Target"), required=True),
    "retry": RETRY.but(nullable=True, default=DEFAULT_RETRY),
    "misfire": MISFIRE.but(nullable=True, default=DEFAULT_MISFIRE),
    "delivery": Choice(DELIVERY_MODES, nullable=True, default=DEFAULT_DELIVERY),
    "concurrency": Choice(CONCURRENCY_POLICIES, nullable=True, default=DEFAULT_CONCURRENCY),
    "priority": Int(lo=PRIORITY_MIN, hi=PRIORITY_MAX, nullable=True, default=0),
    "start_at": JOB_TIME.but(nullable=True),
    "end_at": JOB_TIME.but(nullable=True),
    "jitter": _seconds(JITTER_MAX, nullable=True),
    "paused": Bool(nullable=True, default=False),
    "labels": LABELS,
    "dead_letter": Custom(
        lambda v, k, o, c: None if v is None else check_target(v, k, dead_letter=True),
        _ref("DeadLetterTarget", nullable=True)),
    "notify": Custom(lambda v, k, o, c: validate_job_notify(v, k), _notify_schema),
    "depends_on": Custom(lambda v, k, o, c: check_depends_on(v, k),
                         lambda: _workflow_schema("depends_on")),
    "calendars": Custom(lambda v, k, o, c: check_calendar_refs(v, k, o["namespace"]),
                        lambda: _workflow_schema("calendars")),
    "buffer_limit": Int(lo=1, hi=BUFFER_LIMIT_MAX, nullable=True, description=(
        f"buffer_all: how many fires wait while a run is in flight (null: "
        f"{DEFAULT_BUFFER_LIMIT}); a fire beyond it is skipped")),
    "pause_after_failures": Int(lo=1, hi=PAUSE_AFTER_FAILURES_MAX, nullable=True, description=(
        "after this many failed (or lost) runs in a row the job pauses itself")),
    "max_runs": Int(lo=1, hi=MAX_RUNS_MAX, nullable=True, description=(
        "after this many runs (skipped fires not counted) the job is done: kept, no more "
        "fires")),
}, special=dict.fromkeys(READ_ONLY_KEYS, "{key!r} is read-only; it is assigned by the server"),
    required_first=True, after={"end_at": _end_after_start})
# A replacement may send read-only keys back (check_read_only checks them).
JOB_SENT_BACK = JOB.but(special=dict.fromkeys(READ_ONLY_KEYS))
DEFINITION_KEYS = tuple(JOB.fields)
REQUIRED_KEYS = JOB.required_keys
