"""Time query parameters that take RFC 3339 or a time relative to now.

``since=-1h`` is the operator's way to ask for "the last hour": ``now``, or
a minus sign and one or more ``<n><unit>`` parts in the order w, d, h, m, s
(``-90m``, ``-1h30m``, ``-7d``, ``-2w``). An offset longer than
``MAX_RELATIVE`` is cut to it (no history is older); anything else is a 400
naming the parameter.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from cronman.api import validation as v
from cronman.errors import ValidationError

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
MAX_RELATIVE = timedelta(days=3650)
HINT = "RFC 3339 (2026-11-13T04:13:22Z), 'now', or relative to now (-1h, -30m, -1h30m, -7d)"


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


def parse_time_or_relative(raw: str | None, field: str, *, now: datetime) -> datetime | None:
    """None when absent; else the time ``raw`` names (400 naming ``field`` if none)."""
    if raw is None:
        return None
    offset = relative_offset(raw)
    if offset is not None:
        return now - offset
    try:
        return v.check_time(raw, field, bounded=False)
    except ValidationError:
        raise ValidationError(f"must be {HINT}, not {raw!r}", field=field) from None
