"""A schedule object (JSON) validated and turned into its ``Schedule``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronman.errors import ValidationError
from cronman.schedules.after import parse_after
from cronman.schedules.base import Schedule
from cronman.schedules.cron import parse_cron
from cronman.schedules.simple import parse_interval, parse_once

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
