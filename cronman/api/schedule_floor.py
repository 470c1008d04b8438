"""The floor on how often a namespace token's job may fire (``CRONMAN_MIN_INTERVAL``).

A job created or changed with a namespace token fires, and retries, at most
once per floor (default 1 s): an ``interval`` schedule's ``every``, the
smallest gap between two fires of a ``cron`` schedule (``cron_smallest_gap``:
exact over its whole cycle, reckoned on the wall clock) must be at least the
floor, and ``retry.min_backoff`` (when the
job retries at all) at least the floor or the default backoff (1 s),
whichever is less -- so a raised floor does not refuse the default retry;
otherwise the call is a 400 naming the field. ``once`` fires once;
``after`` follows its upstream jobs, which have floors of their own.

Admin tokens, and an API that needs no token (``CRONMAN_AUTH=off``,
standalone before its first token), are the operator's: not bound. A floor
of 0 turns it off. A PUT or PATCH that keeps a job's stored schedule (or its
retry) is not refused for it: the floor may have been raised since.
"""

from __future__ import annotations

from typing import Any

from cronman.api.auth import Principal
from cronman.errors import ValidationError
from cronman.schedules import CronSchedule, IntervalSchedule, Schedule
from cronman.schedules.cronexpr import CronExpr
from cronman.vocabulary import DEFAULT_MIN_BACKOFF

DAY = 86_400


def check_floor(spec: dict[str, Any], schedule: Schedule, who: Principal, floor: float, *,
                previous: dict[str, Any] | None = None, prefix: str = "") -> None:
    """Refuse ``spec`` (validated, with its parsed ``schedule``) firing or retrying more
    often than ``floor`` seconds, when ``who`` is a namespace token. ``previous``:
    the stored definition being replaced (its ``schedule`` and ``retry``)."""
    if floor <= 0 or who.is_admin:
        return
    at = f"{prefix}." if prefix else ""
    previous = previous or {}
    if spec["schedule"] != previous.get("schedule"):
        gap, field = _smallest_gap(schedule)
        if gap is not None and gap < floor:
            raise ValidationError(_message(floor, "fire"), field=f"{at}schedule.{field}")
    retry = spec["retry"]
    backoff_floor = min(floor, DEFAULT_MIN_BACKOFF)
    if retry != previous.get("retry") and retry["max_attempts"] > 1 \
            and retry["min_backoff"] < backoff_floor:
        raise ValidationError(_message(backoff_floor, "retry"), field=f"{at}retry.min_backoff")


def _smallest_gap(schedule: Schedule) -> tuple[float | None, str]:
    if isinstance(schedule, IntervalSchedule):
        return schedule.every_ms / 1000, "every"
    if isinstance(schedule, CronSchedule):
        return cron_smallest_gap(schedule.expr), "cron"
    return None, ""


def cron_smallest_gap(expr: CronExpr) -> int:
    """The smallest gap in seconds between two consecutive fires of ``expr``.

    Its hours, minutes and seconds are the same on every day it fires, so the
    gaps are those between neighbours of each field -- the last second of one
    allowed minute to the first of the next, and so on up -- and, from one day
    to the next, the last fire of a day to the first of the next. Two of its
    days are taken to be consecutive (the least they can be apart), so this is
    exact whenever two consecutive days fire and errs towards refusing
    otherwise; DST changes (a repeated or skipped hour) are left aside.
    """
    gap = DAY
    first = last = 0  # the first and last fire of one unit of the level below, in seconds
    for values, unit in ((expr.seconds, 1), (expr.minutes, 60), (expr.hours, 3600)):
        ordered = sorted(values)
        step = min((b - a for a, b in zip(ordered, ordered[1:], strict=False)), default=None)
        if step is not None:
            gap = min(gap, step * unit - (last - first))
        first, last = ordered[0] * unit + first, ordered[-1] * unit + last
    return min(gap, DAY - (last - first))


def _message(floor: float, what: str) -> str:
    return (f"must be at least {floor:g} s for a namespace token: jobs {what} at most "
            f"once every {floor:g} s (CRONMAN_MIN_INTERVAL)")
