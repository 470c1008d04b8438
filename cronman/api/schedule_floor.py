"""The floor on how often a namespace token's job may fire (``CRONMAN_MIN_INTERVAL``).

A job created or changed with a namespace token fires, and retries, at most
once per floor (default 1 s): an ``interval`` schedule's ``every``, the gaps
between a ``cron`` schedule's next fires (only a seconds field can go under
a minute) must be at least the floor, and ``retry.min_backoff`` (when the
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

from datetime import datetime
from typing import Any

from cronman.api.auth import Principal
from cronman.errors import ValidationError
from cronman.schedules import CronSchedule, IntervalSchedule, Schedule
from cronman.vocabulary import DEFAULT_MIN_BACKOFF

# A cron schedule's next fires sampled for their smallest gap.
CRON_SAMPLE = 16


def check_floor(spec: dict[str, Any], schedule: Schedule, who: Principal, floor: float, *,
                now: datetime, previous: dict[str, Any] | None = None, prefix: str = "") -> None:
    """Refuse ``spec`` (validated, with its parsed ``schedule``) firing or retrying more
    often than ``floor`` seconds, when ``who`` is a namespace token. ``previous``:
    the stored definition being replaced (its ``schedule`` and ``retry``)."""
    if floor <= 0 or who.is_admin:
        return
    at = f"{prefix}." if prefix else ""
    previous = previous or {}
    if spec["schedule"] != previous.get("schedule"):
        gap, field = _smallest_gap(schedule, now, floor)
        if gap is not None and gap < floor:
            raise ValidationError(_message(floor, "fire"), field=f"{at}schedule.{field}")
    retry = spec["retry"]
    backoff_floor = min(floor, DEFAULT_MIN_BACKOFF)
    if retry != previous.get("retry") and retry["max_attempts"] > 1 \
            and retry["min_backoff"] < backoff_floor:
        raise ValidationError(_message(backoff_floor, "retry"), field=f"{at}retry.min_backoff")


def _smallest_gap(schedule: Schedule, now: datetime, floor: float
                  ) -> tuple[float | None, str]:
    if isinstance(schedule, IntervalSchedule):
        return schedule.every_ms / 1000, "every"
    if isinstance(schedule, CronSchedule) and floor > 1:  # cron's own floor is 1 s
        fires: list[datetime] = []
        t: datetime | None = now
        while t is not None and len(fires) < CRON_SAMPLE:
            t = schedule.next_after(t)
            if t is not None:
                fires.append(t)
        gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
        return (min(gaps) if gaps else None), "cron"
    return None, ""


def _message(floor: float, what: str) -> str:
    return (f"must be at least {floor:g} s for a namespace token: jobs {what} at most "
            f"once every {floor:g} s (CRONMAN_MIN_INTERVAL)")
