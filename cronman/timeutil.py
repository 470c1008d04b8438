"""Time helpers: everything in cronman is timezone-aware UTC."""

from __future__ import annotations

import re
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


# -- times relative to now ------------------------------------------------------
#
# ``-1h`` is the operator's way to say "an hour ago": ``now``, or a minus sign
# and one or more ``<n><unit>`` parts in the order w, d, h, m, s (``-90m``,
# ``-1h30m``, ``-7d``, ``-2w``). The API reads them in its time query
# parameters (``cronman.api.timeparams``), the client and the CLI everywhere
# they take a time.

NOW = "now"
_UNITS = "wdhms"
# The same as _RELATIVE_RE, for OpenAPI (no named groups; at least one part).
RELATIVE_PATTERN = "-(?:" + "|".join(
    rf"\d{{1,9}}{unit}" + "".join(rf"(?:\d{{1,9}}{later})?" for later in _UNITS[i + 1:])
    for i, unit in enumerate(_UNITS)) + ")"
_RELATIVE_RE = re.compile(
    r"^-(?:(?P<w>\d{1,9})w)?(?:(?P<d>\d{1,9})d)?(?:(?P<h>\d{1,9})h)?"
    r"(?:(?P<m>\d{1,9})m)?(?:(?P<s>\d{1,9})s)?$")
_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
# An offset longer than this is cut to it (no history is older).
MAX_RELATIVE = timedelta(days=3650)
TIME_HINT = ("RFC 3339 (2026-11-13T04:13:22Z), 'now', or relative to now "
             "(-1h, -30m, -1h30m, -7d)")


def relative_offset(raw: str) -> timedelta | None:
    """How far back ``raw`` points (``now``: zero); None when it is not relative."""
    text = raw.strip()
    if text == NOW:
        return timedelta(0)
    match = _RELATIVE_RE.match(text)
    if match is None or text == "-":
        return None
    seconds = sum(int(n) * _UNIT_SECONDS[unit]
                  for unit, n in match.groupdict().items() if n is not None)
    return timedelta(seconds=min(seconds, int(MAX_RELATIVE.total_seconds())))


def parse_time_text(raw: str, *, now: datetime | None = None) -> datetime:
    """The time ``raw`` names: RFC 3339, ``now`` or relative to ``now`` (default:
    the clock); ValueError naming the accepted forms otherwise."""
    offset = relative_offset(raw)
    if offset is not None:
        return (utcnow() if now is None else now) - offset
    try:
        return parse_rfc3339(raw)
    except ValueError:
        raise ValueError(f"must be {TIME_HINT}, not {raw!r}") from None
