"""``once`` and ``interval`` schedules: plain arithmetic on Unix milliseconds.

Times are kept at millisecond precision (run ids and the database carry
milliseconds): a finer ``at`` or ``anchor`` is truncated to the millisecond.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from cronman.errors import ValidationError
from cronman.timeutil import ensure_utc, format_rfc3339, from_ms, parse_rfc3339, to_ms

# An interval longer than a century is a mistake, and keeps k * every in range.
MAX_EVERY_SECONDS = 100 * 366 * 86_400


def parse_time(value: Any, field: str) -> datetime:
    """An RFC 3339 string with offset -> aware UTC datetime, truncated to the ms."""
    if not isinstance(value, str):
        raise ValidationError("must be an RFC 3339 timestamp string with an offset, "
                              "e.g. '2026-11-13T04:13:22Z'", field=field)
    try:
        t = parse_rfc3339(value)
    except (ValueError, OverflowError) as exc:
        raise ValidationError(f"is not a valid RFC 3339 timestamp: {exc}", field=field) from None
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


# The last epoch millisecond a datetime can hold, less a second of margin.
_MAX_MS = to_ms(datetime.max.replace(tzinfo=UTC)) - 1000


class OnceSchedule:
    """``{"kind": "once", "at": "<RFC 3339>"}``: one fire, at ``at``."""

    kind = "once"
    __slots__ = ("at",)

    def __init__(self, at: datetime) -> None:
        self.at = at

    def next_after(self, t: datetime) -> datetime | None:
        return self.at if self.at > t else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "once", "at": format_rfc3339(self.at)}


class IntervalSchedule:
    """``{"kind": "interval", "every": s, "anchor": "<RFC 3339>"}``.

    Fires at ``anchor + k * every`` for every integer k (negative too: the
    anchor may lie in the past or in the future). ``every`` is a number of
    seconds, integral or fractional, and must be a whole number of
    milliseconds of at least 1 ms.
    """

    kind = "interval"
    __slots__ = ("every_ms", "anchor_ms")

    def __init__(self, every_ms: int, anchor_ms: int) -> None:
        self.every_ms = every_ms
        self.anchor_ms = anchor_ms

    def next_after(self, t: datetime) -> datetime | None:
        k = (to_ms(t) - self.anchor_ms) // self.every_ms + 1
        try:
            return from_ms(self.anchor_ms + k * self.every_ms)
        except OverflowError:
            return None

    def next_ms_after(self, ms: int) -> int | None:
        """``next_after`` in epoch milliseconds: plain arithmetic (hot path)."""
        fire = self.anchor_ms + ((ms - self.anchor_ms) // self.every_ms + 1) * self.every_ms
        return fire if fire <= _MAX_MS else None

    def to_dict(self) -> dict[str, Any]:
        every: int | float = self.every_ms // 1000 if self.every_ms % 1000 == 0 \
            else self.every_ms / 1000
        return {"kind": "interval", "every": every,
                "anchor": format_rfc3339(from_ms(self.anchor_ms))}


def parse_once(spec: dict[str, Any]) -> OnceSchedule:
    if spec.get("at") is None:
        raise ValidationError("is required for a once schedule", field="at")
    return OnceSchedule(parse_time(spec["at"], "at"))


def parse_interval(spec: dict[str, Any], *, created_at: datetime) -> IntervalSchedule:
    every = spec.get("every")
    if every is None:
        raise ValidationError("is required for an interval schedule (seconds)", field="every")
    if isinstance(every, bool) or not isinstance(every, int | float):
        raise ValidationError("must be a number of seconds", field="every")
    if not math.isfinite(every) or every <= 0:
        raise ValidationError("must be greater than 0", field="every")
    if every > MAX_EVERY_SECONDS:
        raise ValidationError(f"must be at most {MAX_EVERY_SECONDS} seconds", field="every")
    if isinstance(every, int):
        every_ms = every * 1000
    else:
        every_ms = round(every * 1000)
        # A float can hold only so much: beyond ~1e9 s its spacing nears 1 µs.
        if abs(every * 1000 - every_ms) > max(1e-6, 8 * math.ulp(every * 1000)):
            raise ValidationError("must be a whole number of milliseconds", field="every")
        if every_ms < 1:
            raise ValidationError("must be at least 0.001 (1 ms)", field="every")
    anchor = spec.get("anchor")
    if anchor is None:
        anchor_ms = to_ms(ensure_utc(created_at)) // 1000 * 1000
    else:
        anchor_ms = to_ms(parse_time(anchor, "anchor"))
    return IntervalSchedule(_shared_every(every_ms), anchor_ms)


_EVERY: dict[int, int] = {}


def _shared_every(every_ms: int) -> int:
    """One int object per distinct period (jobs held by the million share a few)."""
    got = _EVERY.get(every_ms)
    if got is None:
        if len(_EVERY) >= 4096:
            _EVERY.clear()
        got = _EVERY[every_ms] = every_ms
    return got
