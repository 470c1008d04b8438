"""Differential test of the Quartz day forms against cronsim 2.8.

cronsim implements ``L`` and ``LW`` in day-of-month and ``D#k`` and ``DL`` in
day-of-week, with Debian cron's day-field rule (``*``-prefixed field: both
must match). Thousands of random expressions mixing these forms with plain
items, the other day field ``*`` or ``*/N``, are evaluated by both, in UTC
and across real DST changes on the very days the forms select; the fire
times must agree. The known divergences of test_schedules_cronsim (``A-A/N``,
Lord_Howe hour stepping, starts inside a repeated hour, 6-field DST) are
kept out the same way. Known divergences of the forms themselves:

5. cronsim has neither ``L-n``, ``L-nW`` nor ``nW``; those are checked against
   croniter below (``nW`` only; croniter has no ``L-n`` either) and by the
   definition-based properties in test_schedules_cronday_property.
6. croniter clamps ``nW`` to the month's last day when the month has no day n
   (``31W`` fires on 30 April); Quartz -- and cronman -- skip such a month.
   Pinned in test_nw_in_a_short_month_divergence; the random comparison keeps
   n to 1-28, which every month has.
7. cronsim refuses ``DL`` with a weekday name (``friL``) and reads a bare
   ``L`` in day-of-week as an error, as cronman does; names are used with
   ``#`` only.
8. Cairo's clocks change at midnight (Friday 00:00 -> 01:00): on that day
   cronsim starts a wildcard job at the real 01:00 and steps hours by adding
   3600 s, skipping the 01:xx fires -- the same hour stepping as divergence 2.
   Disagreements there are checked against the minute-walking oracle.

Expressions restricting both day fields with a form are refused by cronman
(cronsim would OR them) and never generated here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import croniter
from cronsim import CronSim

from cronman.schedules import load_zone, parse_schedule
from tests.unit.test_schedules_cronsim import (
    CHANGES,
    CREATED,
    DAYS,
    MONTHS,
    Generator,
    compare,
    ours,
    theirs,
    window,
)
from tests.unit.test_schedules_property import oracle


class FormGenerator(Generator):
    """Random expressions with L, LW, D#k and DL items (cronsim's subset)."""

    def plain_item(self, lo: int, hi: int, names: list[str] | None) -> str:
        while True:
            item = self.item(lo, hi, names)
            if not item.startswith("*"):
                return item

    def dom_forms(self) -> str:
        rng = self.rng
        items = [rng.choice(["L", "LW", "l", "lw"])]
        for _ in range(rng.choice([0, 0, 1, 2])):
            items.append(rng.choice(["L", "LW"]) if rng.random() < 0.2
                         else self.plain_item(1, 31, None))
        rng.shuffle(items)
        return ",".join(items)

    def dow_form(self) -> str:
        rng = self.rng
        weekday = rng.randint(0, 7)
        if rng.random() < 0.5:
            day = str(weekday)
            if rng.random() < 0.4:
                name = DAYS[weekday % 7]
                day = name.upper() if rng.random() < 0.5 else name
            return f"{day}#{rng.randint(1, 5)}"
        return f"{weekday}L"

    def dow_forms(self) -> str:
        rng = self.rng
        items = [self.dow_form()]
        for _ in range(rng.choice([0, 0, 1, 2])):
            items.append(self.dow_form() if rng.random() < 0.5
                         else self.plain_item(0, 7, DAYS))
        rng.shuffle(items)
        return ",".join(items)

    def star(self, hi: int) -> str:
        return "*" if self.rng.random() < 0.6 else f"*/{self.rng.randint(2, hi)}"

    def expression(self, seconds: bool = False) -> str:
        if self.rng.random() < 0.5:
            dom, dow = self.dom_forms(), self.star(7)
        else:
            dom, dow = self.star(31), self.dow_forms()
        fields = [self.field(0, 59), self.field(0, 23), dom, self.field(1, 12, MONTHS), dow]
        if seconds:
            fields.insert(0, self.field(0, 59))
        return " ".join(fields)


def test_forms_utc_five_fields():
    assert compare(seed=11, count=3000, zone="UTC", gen=FormGenerator) == 3000


def test_forms_utc_six_fields():
    assert compare(seed=12, count=1000, zone="UTC", seconds=True, gen=FormGenerator) == 1000


def test_forms_new_york_away_from_transitions():
    # Fires in May-August, when New York is on EDT throughout.
    gen = FormGenerator(13)
    compared = 0
    while compared < 1000:
        expr = gen.expression()
        start = datetime(gen.rng.randint(2001, 2039), 5, gen.rng.randint(1, 28),
                         gen.rng.randint(0, 23), tzinfo=UTC)
        mine = ours(expr, "America/New_York", start, 5)
        if mine is None:
            continue
        other = theirs(expr, "America/New_York", start, 5)
        end = datetime(start.year, 9, 1, tzinfo=UTC)
        assert [t for t in mine if t < end] == [t for t in other if t < end], (expr, start)
        compared += 1


def forms_on(local: datetime) -> list[str]:
    """cronsim-supported day items that select the local date of ``local``."""
    d = local.date()
    nxt_month = (d.replace(day=28) + timedelta(days=4)).replace(day=1)
    ndays = (nxt_month - timedelta(days=1)).day
    weekday = d.isoweekday() % 7
    out = [f"{weekday}#{(d.day - 1) // 7 + 1}", f"{DAYS[weekday]}#{(d.day - 1) // 7 + 1}"]
    if d.day + 7 > ndays:
        out.append(f"{weekday}L")
    if d.day == ndays:
        out.append("L")
    last_weekday = ndays - {6: 1, 0: 2}.get((d.replace(day=ndays).isoweekday()) % 7, 0)
    if d.day == last_weekday:
        out.append("LW")
    return out


# Changes on days that more forms select: Jerusalem's spring Friday (the last
# Friday, the last weekday of March 2024); Cairo's midnight ones (Friday
# 00:00 -> 01:00; Thursday 24:00 -> 23:00, the last day of October 2024).
FORM_CHANGES = {
    **CHANGES,
    "Asia/Jerusalem": ["2024-03-29T00:00:00Z", "2024-10-26T23:00:00Z",
                       "2025-03-28T00:00:00Z", "2025-10-25T23:00:00Z"],
    "Africa/Cairo": ["2024-04-25T22:00:00Z", "2024-10-31T21:00:00Z",
                     "2025-04-24T22:00:00Z", "2025-10-30T21:00:00Z"],
}


def across_changes(zone: str, seed: int, count: int) -> tuple[int, list[str]]:
    """Compare around real offset changes, with day forms on the change day.

    Returns how many were compared and the disagreeing expressions, each of
    which must be a wildcard job on which cronman matches the minute-walking
    oracle (with cronsim's own day predicate, independent of cronman's).
    """
    gen = FormGenerator(seed)
    rng = gen.rng
    tz = load_zone(zone)
    compared, disagreements = 0, []
    for i in range(count):
        changes = FORM_CHANGES[zone]
        change = datetime.fromisoformat(changes[i % len(changes)].replace("Z", "+00:00"))
        local = rng.choice([change, change - timedelta(seconds=1)]).astimezone(tz)
        item = rng.choice(forms_on(local))
        is_dom = item[0] in "Ll"
        hour = rng.choice(["*", "*/2", "1", "2", "3", "1-3", "2,3", "0-4/2", "*/3", "0,2"])
        dom = item if is_dom else gen.star(31) if rng.random() < 0.3 else "*"
        dow = gen.star(7) if is_dom and rng.random() < 0.3 else "*" if is_dom else item
        expr = f"{gen.field(0, 59)} {hour} {dom} * {dow}"
        start = change - timedelta(minutes=rng.randint(61, 400))  # not inside a repeat
        assert start.astimezone(tz).fold == 0
        end = change + timedelta(hours=5)
        if ours(expr, zone, start, 1) is None:
            continue
        mine, other = window(expr, zone, start, end)
        compared += 1
        if mine != other:
            disagreements.append(expr)
            s = parse_schedule({"kind": "cron", "cron": expr, "timezone": zone},
                               job_id="diff", created_at=CREATED)
            sim = CronSim(expr, start)
            assert s.expr.wildcard, (expr, start)
            assert mine == oracle(s, start, end, 60, day_matches=sim.match_day), (expr, start)
    return compared, disagreements


def test_forms_across_dst_changes_agree():
    for zone, seed in (("America/New_York", 14), ("Europe/Berlin", 15),
                       ("Asia/Jerusalem", 17)):
        compared, disagreements = across_changes(zone, seed=seed, count=400)
        assert compared > 350 and disagreements == [], zone


def test_cairo_midnight_gap_disagreements_are_cronsim_hour_stepping():
    """Divergence 8: on a day whose midnight does not exist (Cairo, 00:00 -> 01:00)
    cronsim starts a wildcard job's day at the real 01:00 and steps hours by
    adding 3600 s, so it skips 01:xx fires (``*/45 1-3`` starts at 02:00).
    Every disagreement is such a job, and cronman matches the oracle there."""
    compared, disagreements = across_changes("Africa/Cairo", seed=18, count=400)
    assert compared > 350 and disagreements


def test_cairo_divergence_example():
    start = datetime(2025, 4, 24, 17, 31, tzinfo=UTC)
    cairo = load_zone("Africa/Cairo")
    mine = [t.astimezone(cairo).strftime("%H:%M%z") for t in
            ours("*/45 1-3 * * fri#4", "Africa/Cairo", start, 3)]
    other = [t.astimezone(cairo).strftime("%H:%M%z") for t in
             theirs("*/45 1-3 * * fri#4", "Africa/Cairo", start, 3)]
    assert mine == ["01:00+0300", "01:45+0300", "02:00+0300"]
    assert other == ["02:00+0300", "02:45+0300", "03:00+0300"]


def test_forms_on_the_change_days_do_reach_them():
    """The DST comparison above does select the change days (not a vacuous pass)."""
    berlin = load_zone("Europe/Berlin")
    spring = datetime(2024, 3, 31, 1, 0, tzinfo=UTC).astimezone(berlin)
    assert set(forms_on(spring)) == {"0#5", "sun#5", "0L", "L"}
    mine = ours("30 2 L * *", "Europe/Berlin", datetime(2024, 3, 30, tzinfo=UTC), 1)
    assert mine == theirs("30 2 L * *", "Europe/Berlin", datetime(2024, 3, 30, tzinfo=UTC), 1)
    assert mine[0].astimezone(berlin).isoformat() == "2024-03-31T03:00:00+02:00"


# --- nW against croniter (cronsim has no nW) --------------------------------------

def croniter_times(expr: str, start: datetime, n: int) -> list[datetime]:
    it = croniter(expr, start)
    return [it.get_next(datetime) for _ in range(n)]


def test_nearest_weekday_agrees_with_croniter():
    # croniter 7 misreads some list items (8,*/9 or 3-3,2-6 in the month field
    # become *; 18/46 in the minute field fires at :00), so the other fields
    # here are * or lists of values and A-B ranges (A < B): W is what is compared.
    gen = Generator(16)
    rng = gen.rng

    def item(lo: int, hi: int) -> str:
        a, b = sorted((rng.randint(lo, hi), rng.randint(lo, hi)))
        return str(a) if a == b or rng.random() < 0.6 else f"{a}-{b}"

    def field(lo: int, hi: int) -> str:
        if rng.random() < 0.3:
            return "*"
        return ",".join(item(lo, hi) for _ in range(rng.randint(1, 3)))

    compared = 0
    while compared < 2000:
        day = rng.randint(1, 28)  # divergence 6: every month has these days
        w = f"{day}W" if rng.random() < 0.7 else f"{day}w"
        expr = f"{field(0, 59)} {field(0, 23)} {w} {field(1, 12)} *"
        start = gen.start()
        mine = ours(expr, "UTC", start, 5)
        assert mine is not None
        assert mine == croniter_times(expr, start, 5), (expr, start)
        compared += 1


def test_nw_in_a_short_month_divergence():
    """Divergence 6, pinned: 31W in a 30-day month. April 30 2024 is a Tuesday."""
    start = datetime(2024, 4, 1, tzinfo=UTC)
    assert ours("0 0 31W 4,5 *", "UTC", start, 1) == [datetime(2024, 5, 31, tzinfo=UTC)]
    assert croniter_times("0 0 31W 4,5 *", start, 1) == [datetime(2024, 4, 30, tzinfo=UTC)]
