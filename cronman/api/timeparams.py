"""Time query parameters that take RFC 3339 or a time relative to now.

``since=-1h`` is the operator's way to ask for "the last hour": ``now``, or
a minus sign and one or more ``<n><unit>`` parts in the order w, d, h, m, s
(``-90m``, ``-1h30m``, ``-7d``, ``-2w``). An offset longer than
``MAX_RELATIVE`` is cut to it (no history is older); anything else is a 400
naming the parameter. The forms themselves are read in ``cronman.timeutil``
(the client and the CLI read them there too).
"""

from __future__ import annotations

from datetime import datetime

from cronman.api import validation as v
from cronman.errors import ValidationError
from cronman.timeutil import MAX_RELATIVE, RELATIVE_PATTERN, relative_offset
from cronman.timeutil import TIME_HINT as HINT

__all__ = ["HINT", "MAX_RELATIVE", "RELATIVE_PATTERN", "parse_time_or_relative",
           "relative_offset"]


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
