"""Validation of a job's workflow keys: ``depends_on`` and ``calendars`` (pure).

- ``depends_on``: up to ``DEPENDS_MAX`` entries ``{"job": <ref>, "within":
  s, "wait": s}``. A fire at T runs only when each upstream has a
  ``succeeded`` run scheduled in [T - within, T]; otherwise it waits for up
  to ``wait`` seconds past its due time (default
  ``vocabulary.DEFAULT_DEPENDENCY_WAIT``), woken by the upstream's success,
  then ends ``skipped`` naming the stale upstream. ``job`` is a job id,
  ``namespace/name`` or a name in the job's namespace (resolved to the id
  before the job is stored: :mod:`cronman.api.references`). An empty list is
  stored as null.
- ``calendars``: up to ``CALENDARS_MAX`` names of exclusion calendars, a name
  in the job's namespace or ``namespace/name``; kept as a name where the
  namespace is the job's own, duplicates dropped, an empty list stored as null.

Errors name the offending value (``depends_on[1].within``, ``calendars[0]``).
"""

from __future__ import annotations

import re
from typing import Any

from cronman.errors import ValidationError
from cronman.schedules.after import check_job_ref
from cronman.schedules.calendars import NAME_MAX as CALENDAR_NAME_MAX
from cronman.vocabulary import DEFAULT_DEPENDENCY_WAIT

DEPENDS_MAX = 20
CALENDARS_MAX = 10
WITHIN_MIN = 1
WITHIN_MAX = 366 * 86_400
WAIT_MAX = 7 * 86_400
DEPENDENCY_KEYS = ("job", "within", "wait")
_PART = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
# A calendar's name, with its namespace in front when it is another's.
CALENDAR_REF_PATTERN = f"(?:{_PART}/)?{_PART}"
CALENDAR_REF_RE = re.compile(f"^{CALENDAR_REF_PATTERN}$")
assert CALENDAR_NAME_MAX == 128


def _number(value: Any, field: str, lo: float, hi: float) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValidationError("must be a number of seconds", field=field)
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo:g} and {hi:g} seconds", field=field)
    return int(value) if float(value).is_integer() else value


def check_depends_on(value: Any, field: str) -> list[dict[str, Any]] | None:
    """The normalised ``depends_on`` (references still as given), or None."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValidationError("must be a list of {job, within, wait} objects", field=field)
    if len(value) > DEPENDS_MAX:
        raise ValidationError(f"at most {DEPENDS_MAX} upstream jobs", field=field)
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(value):
        path = f"{field}[{i}]"
        if not isinstance(entry, dict):
            raise ValidationError("must be an object {job, within, wait}", field=path)
        for key in entry:
            if key not in DEPENDENCY_KEYS:
                raise ValidationError(f"unknown key {key!r}", field=f"{path}.{key}")
        if entry.get("job") is None:
            raise ValidationError("is required", field=f"{path}.job")
        if entry.get("within") is None:
            raise ValidationError("is required: how many seconds before a fire the "
                                  "upstream's success may be scheduled", field=f"{path}.within")
        wait = entry.get("wait")
        out.append({
            "job": check_job_ref(entry["job"], f"{path}.job"),
            "within": _number(entry["within"], f"{path}.within", WITHIN_MIN, WITHIN_MAX),
            "wait": DEFAULT_DEPENDENCY_WAIT if wait is None
            else _number(wait, f"{path}.wait", 0, WAIT_MAX),
        })
    return out or None


def check_calendar_refs(value: Any, field: str, namespace: str) -> list[str] | None:
    """The normalised ``calendars`` of a job in ``namespace``, or None."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValidationError("must be a list of calendar names", field=field)
    if len(value) > CALENDARS_MAX:
        raise ValidationError(f"at most {CALENDARS_MAX} calendars", field=field)
    out: list[str] = []
    for i, ref in enumerate(value):
        path = f"{field}[{i}]"
        if not isinstance(ref, str) or CALENDAR_REF_RE.match(ref) is None:
            shown = repr(ref)[:80]
            raise ValidationError(f"{shown} names no calendar: give its name, or "
                                  "namespace/name for another namespace's", field=path)
        ns, sep, name = ref.partition("/")
        if sep and ns == namespace:
            ref = name
        if ref not in out:
            out.append(ref)
    return out or None

