"""The Quartz day forms of a cron expression: ``L``, ``W`` and ``#``.

Vixie cron and cronie have none of these forms (cronie's parser knows
numbers, names, ranges, steps and ``*`` only, and rejects each of them as a
bad day-of-month or day-of-week), so their meaning follows Quartz's
``CronExpression`` and AWS EventBridge, which agree on it. They only choose
days: the wall-clock times on those days go through the same DST rules as
every cron job (:mod:`cronman.schedules.cron`, the ``dst`` override).

Day-of-month items:

- ``L``: the last day of the month; ``L-n`` (n 0-30): n days before it
  (``L-1`` in April is the 29th; Quartz's documentation calls ``L-3`` the
  "third-to-last day", its code -- and cronman -- compute last minus 3). When
  ``L-n`` falls before the 1st (``L-30`` in February) the month has no such day.
- ``LW``: the last weekday (Monday-Friday) of the month; ``L-nW``: the weekday
  nearest to ``L-n``.
- ``nW`` (n 1-31): the weekday nearest to day n *in the same month*: a
  Saturday moves back to Friday and a Sunday on to Monday, except that
  ``1W`` on a Saturday is Monday the 3rd and a Sunday that is the last day
  is Friday, two days before -- the month's edge is never crossed. A month
  without day n (``31W`` in April) has no such day, as in Quartz.

Day-of-week items:

- ``D#k`` (k 1-5): the k-th weekday D of the month (``5#3``, ``fri#3``: the
  third Friday); a month without a fifth one has no ``D#5`` day.
- ``DL``: the last weekday D of the month (``5L``, ``friL``: the last Friday).
- Weekday numbers stay cron's: Sunday is 0 or 7 and Friday is 5. Quartz and
  EventBridge count Sunday as 1 (their ``6#3`` is cronman's ``5#3``): names
  (``fri#3``) read the same everywhere. A bare ``L`` (Quartz: Saturday) and
  ``?`` (Quartz: "no value") are errors, so that an expression copied from
  Quartz does not silently run on another weekday.

These items may stand in comma lists beside plain ones (``1,15,L``,
``mon#1,fri#3``); they take no range and no step. How they combine with the
other day field (decided in :class:`cronman.schedules.cronexpr.CronExpr`):
Vixie's rule still reads a field that starts with ``*`` as unrestricted, and
then both fields must match (``* * 5#3`` is the third Friday; ``*/2 * 5#3``
the third Friday when it falls on an odd day). When *both* fields are
restricted and either uses one of these forms the expression is refused:
Quartz and EventBridge refuse any expression restricting both, and the
Vixie either-day OR has no cronie precedent for these forms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cronman.errors import ValidationError

MAX_LAST_OFFSET = 30  # Quartz's limit for L-n
MAX_NTH = 5

_LAST = re.compile(r"L(?:-(\d{1,2}))?(W)?", re.IGNORECASE | re.ASCII)
_NEAREST = re.compile(r"(\d{1,2})W", re.IGNORECASE | re.ASCII)
_QUESTION_HINT = ("'?' is Quartz's 'no value', not cron syntax: write * (and check weekday "
                  "numbers: cron counts Sunday as 0 or 7, Quartz as 1)")


def _error(message: str) -> ValidationError:
    return ValidationError(message, field="cron")


def _nearest_weekday(day: int, first: int, ndays: int) -> int:
    """The weekday (Mon-Fri) nearest to ``day`` without leaving the month.

    ``first`` is the cron weekday (0 = Sunday) of the month's 1st.
    """
    weekday = (first + day - 1) % 7
    if weekday == 6:  # Saturday
        return 3 if day == 1 else day - 1
    if weekday == 0:  # Sunday
        return day - 2 if day == ndays else day + 1
    return day


@dataclass(frozen=True, slots=True)
class MonthDayForms:
    """The ``L``/``W`` items of a day-of-month field."""

    last: frozenset[int] = frozenset()  # offsets n of L-n (L is 0)
    last_nearest: frozenset[int] = frozenset()  # offsets n of L-nW (LW is 0)
    nearest: frozenset[int] = frozenset()  # days n of nW

    def __bool__(self) -> bool:
        return bool(self.last or self.last_nearest or self.nearest)

    def mask(self, first: int, ndays: int) -> int:
        """Bit d set for each day d these items select in a month of ``ndays``
        days whose 1st is cron weekday ``first``."""
        out = 0
        for n in self.last:
            if n < ndays:
                out |= 1 << (ndays - n)
        for n in self.last_nearest:
            if n < ndays:
                out |= 1 << _nearest_weekday(ndays - n, first, ndays)
        for day in self.nearest:
            if day <= ndays:
                out |= 1 << _nearest_weekday(day, first, ndays)
        return out


@dataclass(frozen=True, slots=True)
class WeekdayForms:
    """The ``#``/``L`` items of a day-of-week field (weekdays 0-6, Sunday 0)."""

    nth: frozenset[tuple[int, int]] = frozenset()  # (weekday, k) of D#k
    last: frozenset[int] = frozenset()  # weekdays of DL

    def __bool__(self) -> bool:
        return bool(self.nth or self.last)

    def mask(self, first: int, ndays: int) -> int:
        """Bit d set for each day d these items select (as MonthDayForms.mask)."""
        out = 0
        for weekday, k in self.nth:
            day = 1 + (weekday - first) % 7 + 7 * (k - 1)
            if day <= ndays:
                out |= 1 << day
        for weekday in self.last:
            day = 1 + (weekday - first) % 7
            out |= 1 << (day + 7 * ((ndays - day) // 7))
        return out


NO_MONTH_DAY_FORMS = MonthDayForms()
NO_WEEKDAY_FORMS = WeekdayForms()


def _items(text: str, field: str) -> list[str]:
    items = text.split(",")
    if not all(items):
        raise _error(f"{field}: empty item in {text!r}")
    return items


def split_day_of_month(text: str) -> tuple[str | None, MonthDayForms]:
    """Separate the ``L``/``W`` items of a day-of-month field from the plain ones.

    Returns the plain items as a comma list (None when there are none) and
    the forms. Raises ValidationError (field ``cron``) for a malformed item.
    """
    if not any(c in text for c in "LlWw?"):
        return text, NO_MONTH_DAY_FORMS
    plain: list[str] = []
    last: set[int] = set()
    last_nearest: set[int] = set()
    nearest: set[int] = set()
    for item in _items(text, "day-of-month"):
        if item == "?":
            raise _error(f"day-of-month: {_QUESTION_HINT}")
        if not any(c in item for c in "LlWw"):
            plain.append(item)
            continue
        m = _LAST.fullmatch(item)
        if m is not None:
            offset = int(m.group(1) or 0)
            if offset > MAX_LAST_OFFSET:
                raise _error(f"day-of-month: offset {offset} in {item!r} is out of range "
                             f"0-{MAX_LAST_OFFSET}")
            (last_nearest if m.group(2) else last).add(offset)
            continue
        m = _NEAREST.fullmatch(item)
        if m is not None:
            day = int(m.group(1))
            if not 1 <= day <= 31:
                raise _error(f"day-of-month: {day} in {item!r} is out of range 1-31")
            nearest.add(day)
            continue
        raise _error(f"day-of-month: {item!r} is not a valid item (L, L-n, LW, L-nW and nW "
                     "stand alone: no ranges or steps)")
    forms = MonthDayForms(frozenset(last), frozenset(last_nearest), frozenset(nearest))
    return (",".join(plain) if plain else None), forms


def split_day_of_week(text: str, weekday: Callable[[str, str], int],
                      ) -> tuple[str | None, WeekdayForms]:
    """Separate the ``#``/``L`` items of a day-of-week field from the plain ones.

    ``weekday(text, item)`` reads one weekday number or name (0-7), raising
    ValidationError for anything else. Returns the plain items as a comma
    list (None when there are none) and the forms.
    """
    if not any(c in text for c in "#Ll?"):  # no weekday name holds an l
        return text, NO_WEEKDAY_FORMS
    plain: list[str] = []
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in _items(text, "day-of-week"):
        if item == "?":
            raise _error(f"day-of-week: {_QUESTION_HINT}")
        if item in ("L", "l"):
            raise _error("day-of-week: a bare 'L' is not accepted (Quartz reads it as "
                         "Saturday): write 6 or sat, or DL such as 5L or friL for the last "
                         "Friday of the month")
        base, hash_sign, k_text = item.partition("#")
        if hash_sign:
            if not (k_text.isascii() and k_text.isdigit() and len(k_text) == 1
                    and 1 <= int(k_text) <= MAX_NTH):
                raise _error(f"day-of-week: in {item!r} the number after # must be "
                             f"1-{MAX_NTH} (the k-th such weekday of the month)")
            nth.add((_single_weekday(base, item, weekday), int(k_text)))
        elif item[-1] in "Ll":
            last.add(_single_weekday(item[:-1], item, weekday))
        else:
            plain.append(item)
    return (",".join(plain) if plain else None), WeekdayForms(frozenset(nth), frozenset(last))


def _single_weekday(text: str, item: str, weekday: Callable[[str, str], int]) -> int:
    if not text or any(c in text for c in "*-/"):
        raise _error(f"day-of-week: {item!r}: # and L follow one weekday (5#3, fri#3, 5L, "
                     "friL); no ranges or steps")
    return weekday(text, item) % 7
