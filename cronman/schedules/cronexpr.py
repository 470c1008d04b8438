"""Cron expressions: parsing into allowed-value sets, and wall-clock matching.

This module knows nothing of time zones: it answers "which is the first local
wall-clock time at or after this one that the expression matches?". The DST
rules live in :mod:`cronman.schedules.cron`.

Syntax (Vixie cron / cronie, plus a seconds field and Jenkins ``H``):

- 5 fields ``minute hour day-of-month month day-of-week``, or 6 with a
  leading ``second``; or one of the macros ``@yearly`` (``@annually``),
  ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.
- Each field is a comma list of items; an item is ``*``, ``N``, ``A-B``, each
  optionally followed by ``/STEP``. ``N/STEP`` means ``N-max/STEP`` (cronie).
- Month names ``jan``..``dec`` and weekday names ``sun``..``sat`` are accepted
  (any case), also inside ranges. Sunday is ``0`` or ``7``.
- A range whose end is below its start (``5-1``) is an error, as is a step of
  0 or a step larger than the field's maximum value.
- Day-of-month and day-of-week: when both fields are restricted a day matching
  *either* fires; when one of them starts with ``*`` (``*/2`` too) both must
  match -- exactly Vixie cron's rule.
- Quartz's day forms (:mod:`cronman.schedules.cronday`): ``L``, ``L-n``,
  ``LW``, ``L-nW`` and ``nW`` in the day-of-month field, ``D#k`` and ``DL`` in
  the day-of-week field (weekdays numbered as above: ``5#3`` is the third
  Friday). With one of them, the other day field must start with ``*``
  (both must then match); restricting both is an error, as in Quartz.
- ``H`` (seconds and minutes fields only) stands for a value chosen by a hash
  of the job id: ``H``, ``H(A-B)``, ``H/STEP`` and ``H(A-B)/STEP`` (a step
  series starting at a hashed offset). The hash is blake2b, so every process
  picks the same value.
- Not supported (error): ``?``, a bare ``L`` in day-of-week, ``@reboot``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

from cronman.errors import ValidationError
from cronman.schedules.cronday import split_day_of_month, split_day_of_week

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES = {name: i + 1 for i, name in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split())}
DOW_NAMES = {name: i for i, name in enumerate("sun mon tue wed thu fri sat".split())}

# Longest month length per month, leap years included.
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
MAX_CRON_LENGTH = 512
# Any satisfiable expression matches within one 400-year Gregorian cycle.
_HORIZON_YEARS = 401
# Day bits 1..31 of a month mask.
_DAY_BITS = (1 << 32) - 2
# _WEEK_BITS[w]: bits p (0..38) with p % 7 == w, for the weekday masks.
_WEEK_BITS = tuple(sum(1 << p for p in range(w, 39, 7)) for w in range(7))
# Parsed expressions shared between jobs (see cron_expr).
SHARED_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    lo: int
    hi: int
    names: dict[str, int] | None = None
    hashable: bool = False


SECOND = _Field("second", 0, 59, hashable=True)
MINUTE = _Field("minute", 0, 59, hashable=True)
HOUR = _Field("hour", 0, 23)
DAY_OF_MONTH = _Field("day-of-month", 1, 31)
MONTH = _Field("month", 1, 12, MONTH_NAMES)
DAY_OF_WEEK = _Field("day-of-week", 0, 7, DOW_NAMES)


def _error(message: str) -> ValidationError:
    return ValidationError(message, field="cron")


def _hash(job_id: str, field: _Field) -> int:
    digest = hashlib.blake2b(f"{job_id}|{field.name}".encode(), digest_size=8,
                             person=b"cronman-H").digest()
    return int.from_bytes(digest, "big")


def _value(text: str, field: _Field, item: str) -> int:
    if text.isascii() and text.isdigit() and len(text) <= 4:
        value = int(text)
    elif field.names is not None and text.lower() in field.names:
        return field.names[text.lower()]
    else:
        raise _error(f"{field.name}: {text!r} is not a valid value (in {item!r})")
    if not field.lo <= value <= field.hi:
        raise _error(f"{field.name}: {value} is out of range {field.lo}-{field.hi}")
    return value


def _range(text: str, field: _Field, item: str) -> tuple[int, int]:
    first, dash, last = text.partition("-")
    lo = _value(first, field, item)
    hi = _value(last, field, item) if dash else lo
    if hi < lo:
        raise _error(f"{field.name}: range {text!r} ends before it starts")
    return lo, hi


def _parse_field(text: str, field: _Field, job_id: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _error(f"{field.name}: empty item in {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit() and len(step_text) <= 4):
                raise _error(f"{field.name}: step {step_text!r} is not a valid number")
            step = int(step_text)
            if step == 0:
                raise _error(f"{field.name}: step must be at least 1")
            if step > field.hi:
                raise _error(f"{field.name}: step {step} is larger than {field.hi}")
        if base == "*":
            lo, hi = field.lo, field.hi
        elif base[:1] in ("H", "h"):
            if not field.hashable:
                raise _error(f"{field.name}: H is only allowed in the second and minute fields")
            lo, hi = field.lo, field.hi
            if len(base) > 1:
                if not (base[1] == "(" and base[-1] == ")"):
                    raise _error(f"{field.name}: {item!r} is not H, H(A-B), H/N or H(A-B)/N")
                lo, hi = _range(base[2:-1], field, item)
            span = hi - lo + 1
            h = _hash(job_id, field)
            if not slash:
                values.add(lo + h % span)
                continue
            lo += h % min(step, span)
        else:
            lo, hi = _range(base, field, item)
            if slash and "-" not in base:
                hi = field.hi
        values.update(range(lo, hi + 1, step))
    return values


def _table(values: AbstractSet[int], size: int) -> tuple[int, ...]:
    """``table[x]`` = the smallest allowed value >= x, or -1; one slot past the end."""
    out = [-1] * (size + 1)
    nxt = -1
    for x in range(size, -1, -1):
        if x in values:
            nxt = x
        out[x] = nxt
    return tuple(out)


def _starts_wild(text: str) -> bool:
    return text.startswith(("*", "H/", "h/"))


class CronExpr:
    """A parsed cron expression: allowed values per field and wall-clock search."""

    __slots__ = ("text", "fields", "has_seconds", "seconds", "minutes", "hours", "days",
                 "months", "weekdays", "dom_star", "dow_star", "dom_forms", "dow_forms",
                 "wildcard", "_next_s", "_next_mi", "_next_h", "_next_mo", "_dom_mask",
                 "_dow_masks", "_masks")

    def __init__(self, text: str, *, job_id: str) -> None:
        self.text = text
        expanded = text.strip()
        if expanded.startswith("@"):
            macro = MACROS.get(expanded.lower())
            if macro is None:
                raise _error(f"unknown macro {expanded!r} (use one of {', '.join(MACROS)})")
            expanded = macro
        parts = expanded.split()
        if len(parts) == 5:
            parts.insert(0, "0")
            self.has_seconds = False
        elif len(parts) == 6:
            self.has_seconds = True
        else:
            raise _error(f"expected 5 fields (or 6 with seconds), got {len(parts)}")
        self.fields = tuple(parts)
        sec, minute, hour, dom, month, dow = parts
        self.seconds = frozenset(_parse_field(sec, SECOND, job_id))
        self.minutes = frozenset(_parse_field(minute, MINUTE, job_id))
        self.hours = frozenset(_parse_field(hour, HOUR, job_id))
        plain_dom, self.dom_forms = split_day_of_month(dom)
        plain_dow, self.dow_forms = split_day_of_week(
            dow, lambda value, item: _value(value, DAY_OF_WEEK, item))
        # days / weekdays: the plain items' values (the forms are kept apart).
        self.days = frozenset(_parse_field(plain_dom, DAY_OF_MONTH, job_id)
                              if plain_dom is not None else ())
        self.months = frozenset(_parse_field(month, MONTH, job_id))
        self.weekdays = frozenset(d % 7 for d in _parse_field(plain_dow, DAY_OF_WEEK, job_id)
                                  ) if plain_dow is not None else frozenset()
        self.dom_star = dom.startswith("*")
        self.dow_star = dow.startswith("*")
        if (self.dom_forms or self.dow_forms) and not (self.dom_star or self.dow_star):
            raise _error(f"day-of-month {dom!r} and day-of-week {dow!r} are both restricted: "
                         "with L, W or # the other day field must be * (as in Quartz and "
                         "EventBridge; cron's either-day rule does not extend to these forms)")
        # Vixie cron's "wildcard" job (MIN_STAR | HR_STAR): drives the DST defaults.
        self.wildcard = _starts_wild(minute) or _starts_wild(hour)

        self._next_s = _table(self.seconds, 60)
        self._next_mi = _table(self.minutes, 60)
        self._next_h = _table(self.hours, 24)
        self._next_mo = _table(self.months, 13)
        self._dom_mask = sum(1 << d for d in self.days)
        # _dow_masks[w]: days (bits 1..31) whose weekday is allowed, for a month
        # whose 1st falls on cron weekday w (0 = Sunday): day d has weekday
        # (w + d - 1) % 7, i.e. bit d of the mask is bit d - 1 + w of the week pattern.
        week = 0
        for wd in self.weekdays:
            week |= _WEEK_BITS[wd]
        self._dow_masks = tuple(((week >> w) << 1) & _DAY_BITS for w in range(7))
        self._masks: dict[int, int] = {}
        if self.dom_forms or self.dow_forms:
            # A month's allowed days depend only on its length and the weekday
            # of its 1st, and every such pair of an allowed month recurs within
            # 400 years: when none allows a day the expression never fires.
            lengths = {_MAX_DAYS[m] for m in self.months} | ({28} if 2 in self.months else set())
            if not any(self._shape_mask(first, n) for n in lengths for first in range(7)):
                raise _error(f"the day fields {dom!r} and {dow!r} select no day of the given "
                             "months: the job would never fire")
        elif (self.dom_star or self.dow_star) and not any(
                d <= _MAX_DAYS[m] for m in self.months for d in self.days):
            raise _error("day-of-month never occurs in the given months: the job would never fire")

    def _shape_mask(self, first: int, ndays: int) -> int:
        """Bit d set for each day d allowed in a month of ``ndays`` days whose
        1st is cron weekday ``first`` (0 = Sunday)."""
        dom_mask = self._dom_mask
        if self.dom_forms:
            dom_mask |= self.dom_forms.mask(first, ndays)
        dow_mask = self._dow_masks[first]
        if self.dow_forms:
            dow_mask |= self.dow_forms.mask(first, ndays)
        if self.dom_star or self.dow_star:
            mask = dom_mask & dow_mask
        else:
            mask = dom_mask | dow_mask
        return mask & ((1 << (ndays + 1)) - 2)

    def _day_mask(self, year: int, month: int) -> int:
        """Bit d set for each day d of the month that the day fields allow."""
        key = year * 12 + month
        mask = self._masks.get(key)
        if mask is None:
            ndays = _MONTH_DAYS[month]
            if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
                ndays = 29
            mask = self._shape_mask((date(year, month, 1).weekday() + 1) % 7, ndays)
            if len(self._masks) >= 1024:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def next_local(self, y: int, mo: int, d: int, h: int, mi: int, s: int,
                   ) -> tuple[int, int, int, int, int, int] | None:
        """The first matching wall-clock time at or after the given one, or None.

        Searches a 400-year horizon (enough for any satisfiable expression)
        and never beyond the year 9999.
        """
        next_s, next_mi, next_h, next_mo = self._next_s, self._next_mi, self._next_h, self._next_mo
        limit = min(y + _HORIZON_YEARS, 9999)
        while y <= limit:
            m2 = next_mo[mo]
            if m2 != mo:
                if m2 < 0:
                    y += 1
                    mo, d, h, mi, s = 1, 1, 0, 0, 0
                    continue
                mo, d, h, mi, s = m2, 1, 0, 0, 0
            days = self._day_mask(y, mo) >> d
            if not days:
                mo += 1
                d, h, mi, s = 1, 0, 0, 0
                continue
            if not days & 1:
                d += (days & -days).bit_length() - 1
                h, mi, s = 0, 0, 0
            h2 = next_h[h]
            if h2 != h:
                if h2 < 0:
                    d += 1
                    h, mi, s = 0, 0, 0
                    continue
                h, mi, s = h2, 0, 0
            mi2 = next_mi[mi]
            if mi2 != mi:
                if mi2 < 0:
                    h += 1
                    mi, s = 0, 0
                    continue
                mi, s = mi2, 0
            s2 = next_s[s]
            if s2 < 0:
                mi += 1
                s = 0
                continue
            return y, mo, d, h, mi, s2
        return None


def uses_job_id(text: str) -> bool:
    """Whether ``text`` may hold an ``H`` item (the only use of the job id).

    Macros expand to plain fields; otherwise any ``h`` counts (``thu`` too:
    a false positive only costs the sharing).
    """
    return not text.lstrip().startswith("@") and ("h" in text or "H" in text)


@lru_cache(maxsize=SHARED_CACHE_SIZE)
def _shared_expr(text: str) -> CronExpr:
    return CronExpr(text, job_id="")


def cron_expr(text: str, *, job_id: str) -> CronExpr:
    """``CronExpr(text, job_id=job_id)``, shared between jobs when ``H`` plays no part.

    A CronExpr is immutable but for its month-mask cache, which holds the same
    answers whoever fills it, so jobs with the same expression share one
    parse (thread-safe: the cache is only read and assigned per key).
    """
    if uses_job_id(text):
        return _hashed_expr(text, job_id)
    return _shared_expr(text)


# Expressions with ``H`` differ between jobs only in their second and minute
# sets, so jobs whose ``H`` resolves alike share one parse (a few thousand
# distinct ones at most per expression).
_HASHED: dict[tuple[str, frozenset[int], frozenset[int]], CronExpr] = {}
HASHED_CACHE_SIZE = 65_536


def _hashed_expr(text: str, job_id: str) -> CronExpr:
    parts = text.split()
    if len(parts) not in (5, 6):
        return CronExpr(text, job_id=job_id)  # a macro, or an error to report
    second, minute = ("0", parts[0]) if len(parts) == 5 else (parts[0], parts[1])
    try:
        key = (text, frozenset(_parse_field(second, SECOND, job_id)),
               frozenset(_parse_field(minute, MINUTE, job_id)))
    except ValidationError:
        return CronExpr(text, job_id=job_id)
    expr = _HASHED.get(key)
    if expr is None:
        if len(_HASHED) >= HASHED_CACHE_SIZE:
            _HASHED.clear()
        expr = _HASHED[key] = CronExpr(text, job_id=job_id)
    return expr
