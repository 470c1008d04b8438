"""Named exclusion calendars: local dates (holidays) on which fires are skipped.

A calendar is a name, an IANA time zone and a set of excluded local dates,
each either one date (``"2026-12-24"``) or a date that recurs every year
(``"--12-25"``, the month-day form of ISO 8601 / XML Schema's gMonthDay;
``"--02-29"`` recurs in leap years only). A fire time is excluded when its
*local date in the calendar's zone* is an excluded date -- whatever zone the
job's own schedule uses. A local date covers every instant whose wall clock
shows that date, so around DST changes it is 23 or 25 hours long (23.5 on
Australia/Lord_Howe), both passes of a repeated hour belong to it, and a date
that a zone skipped entirely (Pacific/Apia's 2011-12-30) excludes nothing.

Pure: no storage, no I/O. ``to_dict()`` is the JSON form to store (sorted,
one entry per date); :func:`parse_calendar` validates that form and raises
ValidationError whose ``field`` names the offending value under a path
(``calendar.dates[3]``, ``calendar.timezone``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from cronman.errors import ValidationError
from cronman.schedules.cron import load_zone

NAME_MAX = 128
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_DATES = 10_000
_KEYS = ("name", "timezone", "dates")
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_YEARLY_RE = re.compile(r"--(\d{2})-(\d{2})", re.ASCII)
_LEAP_YEAR = 2000  # validates a yearly month-day (02-29 included)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ExclusionCalendar:
    """A named set of excluded local dates in one time zone.

    ``dates`` are one-off dates; ``yearly`` are ``(month, day)`` pairs that
    recur every year. Build one with :func:`parse_calendar` (validated) or
    directly from already valid values.
    """

    name: str
    timezone: str
    dates: frozenset[date] = frozenset()
    yearly: frozenset[tuple[int, int]] = frozenset()

    def __post_init__(self) -> None:
        load_zone(self.timezone)  # an unknown zone fails here, not at the first fire

    def excludes_date(self, day: date) -> bool:
        """Whether the local date ``day`` is excluded."""
        return day in self.dates or (day.month, day.day) in self.yearly

    def local_date(self, fire_ms: int) -> date:
        """The calendar-zone local date of the instant ``fire_ms`` (Unix ms)."""
        instant = _EPOCH + timedelta(milliseconds=fire_ms)
        return instant.astimezone(load_zone(self.timezone)).date()

    def excludes(self, fire_ms: int) -> bool:
        """Whether a fire at ``fire_ms`` (Unix ms) falls on an excluded local date."""
        return self.excludes_date(self.local_date(fire_ms))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"name", "timezone", "dates": [...]}``, dates sorted
        (yearly ones first, by month-day)."""
        entries = [f"--{m:02d}-{d:02d}" for m, d in sorted(self.yearly)]
        entries += [d.isoformat() for d in sorted(self.dates)]
        return {"name": self.name, "timezone": self.timezone, "dates": entries}


def reference_key(ref: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of a job's reference to a calendar: its name, in the
    job's ``namespace``, or ``namespace/name``."""
    ns, sep, name = ref.partition("/")
    return (ns, name) if sep else (namespace, ref)


def _field(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _parse_date(value: Any, field: str) -> date | tuple[int, int]:
    if not isinstance(value, str):
        raise ValidationError(f"must be a string: YYYY-MM-DD, or --MM-DD for every year, "
                              f"not {type(value).__name__}", field=field)
    m = _DATE_RE.fullmatch(value)
    if m is not None:
        year, month, day = (int(g) for g in m.groups())
        if year < 1:
            raise ValidationError(f"{value!r}: the year must be 0001-9999", field=field)
        try:
            return date(year, month, day)
        except ValueError as exc:
            raise ValidationError(f"{value!r} is not a calendar date ({exc})",
                                  field=field) from None
    m = _YEARLY_RE.fullmatch(value)
    if m is not None:
        month, day = int(m.group(1)), int(m.group(2))
        try:
            date(_LEAP_YEAR, month, day)
        except ValueError:
            raise ValidationError(f"{value!r}: no month has that day (--MM-DD recurs "
                                  "every year)", field=field) from None
        return month, day
    raise ValidationError(f"{value!r} is not a date: write YYYY-MM-DD for one date or "
                          "--MM-DD for the same date every year", field=field)


def parse_calendar(spec: Any, *, path: str = "calendar") -> ExclusionCalendar:
    """Validate the JSON form of a calendar and build it.

    ``{"name": "de-holidays", "timezone": "Europe/Berlin",
    "dates": ["2026-04-03", "--12-25"]}``: ``name`` (letters, digits, ``.``,
    ``_``, ``-``; at most 128) and ``dates`` (at most 10,000, duplicates
    allowed) are required; ``timezone`` defaults to UTC. Error fields are
    ``path`` plus the key (``calendar.dates[3]``); ``path=""`` gives them
    relative to the calendar object.
    """
    if not isinstance(spec, dict):
        raise ValidationError("must be an object with name, timezone and dates",
                              field=path)
    for key in spec:
        if key not in _KEYS:
            raise ValidationError(f"unknown key (allowed: {', '.join(_KEYS)})",
                                  field=_field(path, str(key)))
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError("is required: a non-empty string", field=_field(path, "name"))
    if len(name) > NAME_MAX or NAME_RE.fullmatch(name) is None:
        raise ValidationError(f"must be at most {NAME_MAX} letters, digits, '.', '_' or '-', "
                              "starting with a letter or digit", field=_field(path, "name"))
    tz = spec.get("timezone", "UTC")
    if not isinstance(tz, str):
        raise ValidationError("must be a string (an IANA zone name)",
                              field=_field(path, "timezone"))
    try:
        load_zone(tz)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=_field(path, "timezone")) from None
    raw = spec.get("dates")
    dates_field = _field(path, "dates")
    if not isinstance(raw, list):
        raise ValidationError("is required: a list of YYYY-MM-DD or --MM-DD strings",
                              field=dates_field)
    if len(raw) > MAX_DATES:
        raise ValidationError(f"holds {len(raw)} dates; at most {MAX_DATES}",
                              field=dates_field)
    dates: set[date] = set()
    yearly: set[tuple[int, int]] = set()
    for i, value in enumerate(raw):
        parsed = _parse_date(value, f"{dates_field}[{i}]")
        if isinstance(parsed, date):
            dates.add(parsed)
        else:
            yearly.add(parsed)
    return ExclusionCalendar(name, tz, frozenset(dates), frozenset(yearly))
