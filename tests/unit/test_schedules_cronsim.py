"""Differential test of cron schedules against cronsim 2.8 (an independent implementation).

Thousands of random Vixie-style expressions (lists, ranges, steps, names,
Sunday as 7, restricted and ``*``-prefixed day-of-month/day-of-week mixes) are
evaluated by both; the fire times must agree.

cronsim follows Debian cron's rules -- day-of-month/day-of-week OR unless
either field starts with ``*``; for 5-field expressions whose minute and hour
do not start with ``*`` a missing local time moves to the first real minute
after the gap and a repeated one fires at its first occurrence; other
expressions step through real instants -- which are the rules cronman
documents. Known cronsim divergences, kept out of the comparison and covered
by tests of their own here:

1. ``A-A/N`` (a one-value range with a step) is read by cronsim as ``A/N``
   (from A to the field's maximum); Vixie cron and cronman give just ``A``.
2. For ``*``-prefixed minute/hour expressions cronsim advances the hour by
   adding 3600 s in UTC; after Australia/Lord_Howe's 30-minute shift that
   lands on :30 and skips or misplaces fires (e.g. ``* 17 * * *`` starts at
   17:30 on the change day; ``55 * * * *`` loses the second 01:55). Every
   disagreement there is checked against the brute-force oracle instead.
3. Started inside the second pass of a repeated hour, cronsim returns the
   first-pass occurrence of a fixed time -- earlier than the start. Start
   times here never fall inside a repeated hour.
4. 6-field expressions get no DST handling in cronsim: compared in UTC only.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from cronsim import CronSim

from cronman.errors import ValidationError
from cronman.schedules import CronExpr, load_zone, parse_schedule
from tests.unit.test_schedules_property import oracle

CREATED = datetime(2020, 1, 1, tzinfo=UTC)
MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
DAYS = "sun mon tue wed thu fri sat".split()


class Generator:
    """Random valid expressions, reproducible from a seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self, lo: int, hi: int, names: list[str] | None) -> tuple[str, int]:
        v = self.rng.randint(lo, hi)
        if names and self.rng.random() < 0.35 and (len(names) == 12 or v < 7):
            name = names[v - 1] if len(names) == 12 else names[v]
            return (name.upper() if self.rng.random() < 0.3 else name), v
        return str(v), v

    def item(self, lo: int, hi: int, names: list[str] | None) -> str:
        r = self.rng.random()
        step = self.rng.randint(1, hi)
        if r < 0.15:
            return "*"
        if r < 0.3:
            return f"*/{step}"
        if r < 0.55:
            return self.value(lo, hi, names)[0]
        a_text, a = self.value(lo, hi, names)
        if r < 0.65:
            return f"{a}/{step}"
        b_text, b = self.value(lo, hi, names)
        if a > b:
            a_text, b_text, a, b = b_text, a_text, b, a
        text = f"{a_text}-{b_text}"
        if a != b and self.rng.random() < 0.4:  # divergence 1: no A-A/N
            text += f"/{step}"
        return text

    def field(self, lo: int, hi: int, names: list[str] | None = None) -> str:
        n = 1 if self.rng.random() < 0.7 else self.rng.randint(2, 4)
        return ",".join(self.item(lo, hi, names) for _ in range(n))

    def expression(self, seconds: bool = False) -> str:
        fields = [self.field(0, 59), self.field(0, 23), self.field(1, 31),
                  self.field(1, 12, MONTHS), self.field(0, 7, DAYS)]
        r = self.rng.random()
        if r < 0.2:
            fields[2] = "*"
        elif r < 0.4:
            fields[4] = "*"
        if seconds:
            fields.insert(0, self.field(0, 59))
        return " ".join(fields)

    def start(self, first_year: int = 2000, last_year: int = 2040) -> datetime:
        rng = self.rng
        return datetime(rng.randint(first_year, last_year), rng.randint(1, 12),
                        rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59),
                        rng.randint(0, 59), tzinfo=UTC)


def ours(expr: str, zone: str, start: datetime, n: int) -> list[datetime] | None:
    try:
        s = parse_schedule({"kind": "cron", "cron": expr, "timezone": zone}, job_id="diff",
                           created_at=CREATED)
    except ValidationError as exc:
        assert "never" in exc.message, (expr, exc.message)
        return None
    out, t = [], start
    for _ in range(n):
        t = s.next_after(t)
        assert t is not None
        out.append(t)
    return out


def theirs(expr: str, zone: str, start: datetime, n: int) -> list[datetime] | None:
    it = CronSim(expr, start.astimezone(load_zone(zone)))
    try:
        return [next(it).astimezone(UTC) for _ in range(n)]
    except StopIteration:  # cronsim gives up after 50 years
        return None


def compare(seed: int, count: int, zone: str, *, seconds: bool = False, n: int = 5,
            starts=None, gen=None) -> int:
    gen = (gen or Generator)(seed)
    compared = 0
    while compared < count:
        expr = gen.expression(seconds)
        start = starts(gen) if starts else gen.start()
        mine = ours(expr, zone, start, n)
        if mine is None:
            continue
        other = theirs(expr, zone, start, n)
        assert other is not None, expr
        assert mine == other, (expr, zone, start)
        compared += 1
    return compared


def test_utc_five_fields():
    assert compare(seed=1, count=3000, zone="UTC") == 3000


def test_utc_six_fields():
    assert compare(seed=2, count=1000, zone="UTC", seconds=True) == 1000


def away_from_transitions(gen: Generator) -> datetime:
    # May to July, when New York is on EDT for months either way; sparse
    # expressions may still run past the change, so the comparison keeps to
    # times before September.
    return datetime(gen.rng.randint(2001, 2039), gen.rng.randint(5, 7), gen.rng.randint(1, 28),
                    gen.rng.randint(0, 23), gen.rng.randint(0, 59), tzinfo=UTC)


def test_new_york_away_from_transitions():
    gen = Generator(3)
    compared = 0
    while compared < 1500:
        expr = gen.expression()
        start = away_from_transitions(gen)
        mine = ours(expr, "America/New_York", start, 5)
        if mine is None:
            continue
        other = theirs(expr, "America/New_York", start, 5)
        end = datetime(start.year, 9, 1, tzinfo=UTC)
        assert [t for t in mine if t < end] == [t for t in other if t < end], (expr, start)
        compared += 1


def hours_near_changes(gen: Generator) -> str:
    """Expressions whose hour field hits the small hours where clocks change."""
    rng = gen.rng
    minute = gen.field(0, 59)
    hour = rng.choice(["*", "*/2", "1", "2", "3", "1-3", "2,3", "0-4/2", "*/3", "0,2"])
    return f"{minute} {hour} * * {rng.choice(['*', '*', '0', '1-5'])}"


CHANGES = {
    "America/New_York": ["2024-03-10T07:00:00Z", "2024-11-03T06:00:00Z",
                         "2030-03-10T07:00:00Z", "2030-11-03T06:00:00Z"],
    "Europe/Berlin": ["2024-03-31T01:00:00Z", "2024-10-27T01:00:00Z",
                      "2031-03-30T01:00:00Z", "2031-10-26T01:00:00Z"],
    "Australia/Lord_Howe": ["2024-10-05T15:30:00Z", "2024-04-06T15:00:00Z"],
}


def window(expr: str, zone: str, start: datetime, end: datetime) -> tuple[list, list]:
    """Both implementations' fire times in (start, end]."""
    s = parse_schedule({"kind": "cron", "cron": expr, "timezone": zone}, job_id="diff",
                       created_at=CREATED)
    mine, t = [], s.next_after(start)
    while t is not None and t <= end:
        mine.append(t)
        t = s.next_after(t)
    other = []
    for t in CronSim(expr, start.astimezone(load_zone(zone))):
        t = t.astimezone(UTC)
        if t > end:
            break
        other.append(t)
    return mine, other


def across_changes(zone: str, seed: int, count: int) -> list[str]:
    """Compare around real offset changes; return the disagreeing expressions."""
    gen = Generator(seed)
    s_zone = load_zone(zone)
    disagreements = []
    for i in range(count):
        expr = hours_near_changes(gen)
        change = datetime.fromisoformat(CHANGES[zone][i % len(CHANGES[zone])].replace(
            "Z", "+00:00"))
        # Start before the change and outside any repeated stretch (divergence 3).
        start = change - timedelta(minutes=gen.rng.randint(61, 400))
        assert start.astimezone(s_zone).fold == 0
        end = change + timedelta(hours=5)
        mine, other = window(expr, zone, start, end)
        if mine != other:
            disagreements.append(expr)
            s = parse_schedule({"kind": "cron", "cron": expr, "timezone": zone},
                               job_id="diff", created_at=CREATED)
            assert mine == oracle(s, start, end, 60), (expr, start)
    return disagreements


def test_dst_zones_across_changes_agree():
    assert across_changes("America/New_York", seed=4, count=400) == []
    assert across_changes("Europe/Berlin", seed=5, count=400) == []


def test_lord_howe_disagreements_are_cronsim_hour_stepping():
    """Divergence 2: every disagreement is a ``*`` minute/hour job, and cronman
    matches the brute-force oracle there."""
    bad = across_changes("Australia/Lord_Howe", seed=6, count=200)
    assert bad, "expected cronsim's known Lord_Howe divergence to show up"
    for expr in bad:
        assert CronExpr(expr, job_id="diff").wildcard, expr


def test_lord_howe_divergence_example():
    change = datetime(2024, 10, 5, 15, 30, tzinfo=UTC)  # 02:00 +10:30 -> 02:30 +11
    start = change - timedelta(hours=3)
    mine = ours("* 17 * * *", "Australia/Lord_Howe", start, 1)
    other = theirs("* 17 * * *", "Australia/Lord_Howe", start, 1)
    lh = load_zone("Australia/Lord_Howe")
    assert mine[0].astimezone(lh).isoformat() == "2024-10-06T17:00:00+11:00"
    assert other[0].astimezone(lh).isoformat() == "2024-10-06T17:30:00+11:00"


def test_single_value_range_with_step_divergence():
    """Divergence 1, pinned: cronsim reads 5-5/10 as 5/10; cronman as 5."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert ours("5-5/10 * * * *", "UTC", start, 2) == [
        datetime(2026, 1, 1, 0, 5, tzinfo=UTC), datetime(2026, 1, 1, 1, 5, tzinfo=UTC)]
    assert theirs("5-5/10 * * * *", "UTC", start, 2) == [
        datetime(2026, 1, 1, 0, 5, tzinfo=UTC), datetime(2026, 1, 1, 0, 15, tzinfo=UTC)]
