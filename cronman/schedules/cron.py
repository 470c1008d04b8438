"""Cron schedules in an IANA time zone, with Vixie cron's DST rules.

A cron expression matches *local wall-clock* times; this module turns those
into instants. Around a DST (or any UTC offset) change a wall-clock time can
be missing (a *gap*, offset increases) or occur twice (a *repeat*, offset
decreases). Shifts of any size are handled (Australia/Lord_Howe moves 30
minutes, Pacific/Apia once skipped a whole day).

The precise rule:

- A job is a *wildcard* job when its minute or hour field starts with ``*``
  (``*``, ``*/N``; also ``H/N``, the hashed twin of ``*/N``). This is Vixie
  cron's ``MIN_STAR | HR_STAR`` test; the seconds field plays no part. Every
  other job (``30 2 * * *``, ``0 1-23/2 * * *``, ``H 3 * * *``, ``@daily``) is
  a *fixed-time* job.
- ``gap``: ``shift`` -- a matching wall-clock time that does not exist fires
  once at the first instant after the gap (02:30 New York on spring-forward
  day fires at 03:00 EDT; several such times, and a match at the gap's end
  itself, fire once, together). ``skip`` -- it does not fire.
- ``repeat``: ``first`` -- a matching wall-clock time that occurs twice fires
  at its first occurrence only. ``both`` -- it fires at both.
- Defaults: fixed-time jobs ``shift`` + ``first``; wildcard jobs ``skip`` +
  ``both`` (so ``30 * * * *`` fires at 01:30 EDT and at 01:30 EST, and has no
  02:30 on spring-forward day: it fires in every real hour). The schedule's
  ``dst`` object overrides either default, for any job.

Zone data comes from the pinned ``tzdata`` package, never from the host's
``/usr/share/zoneinfo``: replicas on hosts with different system zone data
still compute identical fire times. Zones without offset changes (UTC,
``Etc/GMT+5``) take a fast path.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any
from zoneinfo import ZoneInfo

from cronman.errors import ValidationError
from cronman.schedules.cronexpr import MAX_CRON_LENGTH, CronExpr, cron_expr
from cronman.timeutil import to_ms

GAP_POLICIES = ("shift", "skip")
REPEAT_POLICIES = ("first", "both")

_SECOND = timedelta(seconds=1)
_UTC_NAMES = frozenset({
    "UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu",
    "GMT", "Etc/GMT", "Etc/GMT+0", "Etc/GMT-0", "Etc/GMT0", "GMT+0", "GMT-0", "GMT0",
    "Etc/Greenwich", "Greenwich",
})
_ETC_GMT = re.compile(r"Etc/GMT([+-])(\d{1,2})")
_ZONES: dict[str, ZoneInfo] = {}


@cache
def zone_names() -> frozenset[str]:
    """Every time zone name a cron schedule accepts."""
    return _zone_keys()


def _zone_keys() -> frozenset[str]:
    try:
        text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    except (ModuleNotFoundError, OSError):  # pragma: no cover - tzdata is a pinned requirement
        import zoneinfo
        return frozenset(zoneinfo.available_timezones())
    return frozenset(text.split())


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` from the pinned tzdata package (cached).

    Raises ValidationError (field ``timezone``) for anything that is not an
    IANA zone name.
    """
    zone = _ZONES.get(name)
    if zone is not None:
        return zone
    if not isinstance(name, str) or name not in _zone_keys():
        raise ValidationError(f"unknown time zone {name!r} (use an IANA name such as "
                              "'Europe/Berlin')", field="timezone")
    try:
        ref = resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
        with ref.open("rb") as fobj:
            zone = ZoneInfo.from_file(fobj, key=name)
    except (ModuleNotFoundError, OSError):  # pragma: no cover - tzdata is a pinned requirement
        zone = ZoneInfo(name)
    _ZONES[name] = zone
    return zone


def _fixed_offset(name: str) -> timedelta | None:
    """The constant UTC offset of zones that never change it, else None."""
    if name in _UTC_NAMES:
        return timedelta(0)
    m = _ETC_GMT.fullmatch(name)
    if m and int(m.group(2)) <= 14:
        hours = int(m.group(2))
        return timedelta(hours=-hours if m.group(1) == "+" else hours)  # POSIX sign
    return None


def _transition(zone: ZoneInfo, lo: int, hi: int) -> int:
    """The instant (Unix s) in (lo, hi] where the offset changes from lo's.

    Offsets change on whole seconds; ``lo`` has the old offset and ``hi`` the
    new one.
    """
    old = datetime.fromtimestamp(lo, zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == old:
            lo = mid
        else:
            hi = mid
    return hi


def _ts(naive_utc: datetime) -> int:
    return int(naive_utc.replace(tzinfo=UTC).timestamp())


def _naive_utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


class CronSchedule:
    """``{"kind": "cron", "cron": ..., "timezone": ..., "dst": {...}}``."""

    kind = "cron"
    __slots__ = ("expr", "timezone", "zone", "dst", "gap_shift", "repeat_both", "_offset")

    def __init__(self, expr: CronExpr, timezone_name: str, dst: dict[str, str] | None) -> None:
        self.expr = expr
        self.timezone = timezone_name
        self.zone = load_zone(timezone_name)
        self.dst = dst
        dst = dst or {}
        self.gap_shift = dst.get("gap", "skip" if expr.wildcard else "shift") == "shift"
        self.repeat_both = dst.get("repeat", "both" if expr.wildcard else "first") == "both"
        self._offset = _fixed_offset(timezone_name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "cron", "cron": self.expr.text, "timezone": self.timezone}
        if self.dst:
            out["dst"] = dict(self.dst)
        return out

    def _local_from(self, local: datetime) -> datetime | None:
        """The first matching wall-clock time at or after ``local`` (naive)."""
        found = self.expr.next_local(local.year, local.month, local.day, local.hour,
                                     local.minute, local.second)
        return None if found is None else datetime(*found)

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire time strictly after ``t`` (aware; naive taken as UTC)."""
        if t.tzinfo is not UTC:
            t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
        try:
            if self._offset is not None:
                off = self._offset
                local = (t + off).replace(tzinfo=None, microsecond=0) + _SECOND
                found = self._local_from(local)
                return None if found is None else (found - off).replace(tzinfo=UTC)
            lt = t.astimezone(self.zone)
            off_t: timedelta = lt.utcoffset()  # type: ignore[assignment]
            start = lt.replace(tzinfo=None, microsecond=0) + _SECOND
            if lt.fold == 0:
                off_later: timedelta = lt.replace(fold=1).utcoffset()  # type: ignore[assignment]
                if off_later < off_t:
                    return self._from_first_pass(t, start, off_t, off_later)
            return self._scan(t, start)
        except (OverflowError, ValueError):  # past the datetime range (year 1 / 9999)
            return None

    def _from_first_pass(self, t: datetime, start: datetime, off0: timedelta,
                         off1: timedelta) -> datetime | None:
        """next_after when ``t`` lies in the first pass of a repeated stretch.

        Fire order: matches later in the first pass (old offset ``off0``), then
        the second pass (new offset ``off1``) if repeats fire, then onwards.
        """
        lo = to_ms(t) // 1000
        shift = int((off0 - off1).total_seconds())
        change = _naive_utc(_transition(self.zone, lo, lo + shift))
        first_pass_end = change + off0  # local, exclusive
        found = self._local_from(start)
        if found is not None and found < first_pass_end:
            return (found - off0).replace(tzinfo=UTC)
        if self.repeat_both:
            found = self._local_from(change + off1)
            if found is not None and found < first_pass_end:
                return (found - off1).replace(tzinfo=UTC)
        return self._scan(t, first_pass_end)

    def _scan(self, t: datetime, local: datetime) -> datetime | None:
        """The first fire after ``t`` among matches at or after wall-clock ``local``.

        ``t`` is not in the first pass of a repeated stretch, so wall-clock
        order is instant order from here on.
        """
        zone = self.zone
        while True:
            found = self._local_from(local)
            if found is None:
                return None
            off0: timedelta = found.replace(tzinfo=zone).utcoffset()  # type: ignore[assignment]
            off1: timedelta = found.replace(tzinfo=zone, fold=1).utcoffset()  # type: ignore[assignment]
            if off0 == off1:
                return (found - off0).replace(tzinfo=UTC)
            if off0 > off1:
                # Repeated wall-clock time: first occurrence, then (maybe) second.
                first = (found - off0).replace(tzinfo=UTC)
                if first > t:
                    return first
                if self.repeat_both:
                    second = (found - off1).replace(tzinfo=UTC)
                    if second > t:
                        return second
                    local = found + _SECOND
                    continue
                # Skip the rest of the repeated stretch at once.
                change = _transition(zone, _ts(found - off0), _ts(found - off1))
                local = max(_naive_utc(change) + off0, found + _SECOND)
                continue
            # Wall-clock time inside a gap.
            change = _transition(zone, _ts(found - off1), _ts(found - off0))
            if self.gap_shift:
                return datetime.fromtimestamp(change, UTC)
            local = max(_naive_utc(change) + off1, found + _SECOND)


def parse_cron(spec: dict[str, Any], *, job_id: str) -> CronSchedule:
    """Build a CronSchedule from its JSON object (keys already checked)."""
    text = spec.get("cron")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("is required: a cron expression string", field="cron")
    if len(text) > MAX_CRON_LENGTH:
        raise ValidationError(f"is longer than {MAX_CRON_LENGTH} characters", field="cron")
    tz = spec.get("timezone")
    if tz is None:
        tz = "UTC"
    elif not isinstance(tz, str):
        raise ValidationError("must be a string (an IANA zone name)", field="timezone")
    dst = _parse_dst(spec.get("dst"))
    expr = cron_expr(text.strip(), job_id=job_id)
    return CronSchedule(expr, tz, dst)


def _parse_dst(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError('must be an object: {"gap": "shift"|"skip", '
                              '"repeat": "first"|"both"}', field="dst")
    for key in value:
        if key not in ("gap", "repeat"):
            raise ValidationError("unknown key (allowed: gap, repeat)", field=f"dst.{key}")
    out: dict[str, str] = {}
    for key, allowed in (("gap", GAP_POLICIES), ("repeat", REPEAT_POLICIES)):
        if key in value:
            if value[key] not in allowed:
                raise ValidationError(f"must be one of {', '.join(allowed)}", field=f"dst.{key}")
            out[key] = value[key]
    return out or None
