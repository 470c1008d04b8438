"""Schedules (SPEC §3): fire times as a pure function of the schedule object.

Four kinds -- ``once``, ``interval``, ``cron`` and ``after`` -- each turned by
:func:`parse_schedule` into an object with ``next_after(t)`` (the first fire
time strictly after ``t``) and ``to_dict()`` (the normalised JSON form).
:class:`JobTimes` adds a job's ``start_at``/``end_at`` window and jitter.
No I/O: every replica computes the same times from the same job.

Precision: ``once`` and ``interval`` times are kept to the millisecond (a
finer ``at``/``anchor`` is truncated); cron times are whole seconds.
The cron syntax is described in :mod:`cronman.schedules.cronexpr` (Quartz's
day forms ``L``, ``W``, ``#`` in :mod:`cronman.schedules.cronday`), the DST
rules in :mod:`cronman.schedules.cron`. Named exclusion calendars (holiday
dates per zone) are modelled in :mod:`cronman.schedules.calendars`. An
``after`` schedule (:mod:`cronman.schedules.after`) has no fire times: its
job is fired by the success of the upstream jobs it names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronman.errors import ValidationError
from cronman.schedules.after import AfterSchedule, parse_after
from cronman.schedules.calendars import ExclusionCalendar, parse_calendar
from cronman.schedules.cron import CronSchedule, load_zone, parse_cron
from cronman.schedules.cronexpr import CronExpr
from cronman.schedules.simple import IntervalSchedule, OnceSchedule, parse_interval, parse_once
from cronman.schedules.window import JobTimes, Schedule, job_times

__all__ = [
    "KINDS", "AfterSchedule", "CronExpr", "CronSchedule", "ExclusionCalendar", "IntervalSchedule", "JobTimes",
    "OnceSchedule", "Schedule", "job_times", "load_zone", "parse_calendar", "parse_schedule",
]

KINDS = ("once", "interval", "cron", "after")
_KEYS = {
    "once": ("kind", "at"),
    "interval": ("kind", "every", "anchor"),
    "cron": ("kind", "cron", "timezone", "dst"),
    "after": ("kind", "jobs", "mode"),
}


def parse_schedule(spec: dict[str, Any], *, job_id: str, created_at: datetime) -> Schedule:
    """Validate a schedule object and build its Schedule.

    Raises ValidationError whose ``field`` is relative to the schedule object
    (``kind``, ``cron``, ``timezone``, ``at``, ``every``, ``anchor``,
    ``dst.gap``, ``dst.repeat``, ``jobs[i]``, ``mode``, an unknown key's name, or ``""`` for the
    object itself). ``job_id`` seeds the ``H`` of cron expressions;
    ``created_at`` (truncated to the second) is the default interval anchor.
    A ``once`` time in the past is accepted here.
    """
    if not isinstance(spec, dict):
        raise ValidationError("must be an object", field="")
    kind = spec.get("kind")
    if kind is None:
        raise ValidationError(f"is required: one of {', '.join(KINDS)}", field="kind")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise ValidationError(f"must be one of {', '.join(KINDS)}", field="kind")
    allowed = _KEYS[kind]
    for key in spec:
        if key not in allowed:
            raise ValidationError(f"unknown key for a {kind} schedule "
                                  f"(allowed: {', '.join(allowed)})", field=str(key))
    if kind == "once":
        return parse_once(spec)
    if kind == "interval":
        return parse_interval(spec, created_at=created_at)
    if kind == "after":
        return parse_after(spec)
    return parse_cron(spec, job_id=job_id)
