"""Time helpers: everything in cronman is timezone-aware UTC."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_ms(t: datetime) -> int:
    """Unix milliseconds of an aware datetime (exact, no float rounding)."""
    delta = t - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of Unix milliseconds ``ms``."""
    if 0 <= ms < _FLOAT_EXACT_MS:
        return datetime.fromtimestamp(ms / 1000, UTC)
    return EPOCH + timedelta(milliseconds=ms)


# Below 2**32 seconds (the year 2106) a float's error on a count of seconds
# with three decimals is under half a microsecond, which ``fromtimestamp``
# rounds away: exact, at half the cost of ``EPOCH + timedelta`` (it runs
# several times per fire).
_FLOAT_EXACT_MS = 2**32 * 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ensure_utc(t: datetime) -> datetime:
    """Aware datetimes are converted to UTC; naive ones are taken as UTC."""
    if t.tzinfo is None:
        return t.replace(tzinfo=UTC)
    return t.astimezone(UTC)


def format_rfc3339(t: datetime | None) -> str | None:
    """``2026-11-22T07:00:00Z``, with fractional seconds only when present."""
    if t is None:
        return None
    if t.tzinfo is not UTC:
        t = ensure_utc(t)
    # isoformat is C code (strftime costs several times more, per fire):
    # "YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00".
    text = t.isoformat()[:-6]
    return (text.rstrip("0") if t.microsecond else text) + "Z"


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 timestamp; an explicit offset (or ``Z``) is required."""
    if not isinstance(value, str):
        raise ValueError("must be an RFC 3339 string")
    text = value.strip()
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        raise ValueError("must carry a UTC offset or 'Z'")
    return t.astimezone(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
