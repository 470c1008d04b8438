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

from cronman.schedules.after import AfterSchedule
from cronman.schedules.base import Schedule
from cronman.schedules.calendars import ExclusionCalendar, parse_calendar
from cronman.schedules.cron import CronSchedule, load_zone
from cronman.schedules.cronexpr import CronExpr
from cronman.schedules.parse import KINDS, parse_schedule
from cronman.schedules.simple import IntervalSchedule, OnceSchedule
from cronman.schedules.window import JobTimes, job_times

__all__ = [
    "KINDS", "AfterSchedule", "CronExpr", "CronSchedule", "ExclusionCalendar", "IntervalSchedule", "JobTimes",
    "OnceSchedule", "Schedule", "job_times", "load_zone", "parse_calendar", "parse_schedule",
]
