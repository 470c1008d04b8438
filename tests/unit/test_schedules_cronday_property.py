"""Property tests for the Quartz day forms (``L``, ``L-n``, ``LW``, ``L-nW``, ``nW``,
``D#k``, ``DL``).

Expressions are drawn as structured items and rendered to text; the same
items give a day predicate written here from the definitions alone (the
nearest weekday as "the weekday of the month closest to day n", the k-th
weekday as "(day - 1) // 7 + 1 == k", the last one as "a week later is in
the next month"), so the oracle shares no code with cronman's bit masks.
Fire times are checked against it by walking days (UTC), and by the
minute-walking DST oracle of test_schedules_property around real offset
changes, with day items chosen to land on the change day.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cronman.schedules import load_zone
from tests.unit.test_schedules_property import (
    SETTINGS,
    TRANSITIONS,
    ZONES,
    build,
    dst_overrides,
    instant,
    oracle,
    sequence,
)

DAY_NAMES = "sun mon tue wed thu fri sat".split()
# More changes on days the forms reach: Friday and Thursday ones.
FORM_TRANSITIONS = TRANSITIONS + [
    ("Africa/Cairo", "2024-04-25T22:00:00Z"), ("Africa/Cairo", "2024-10-31T21:00:00Z"),
    ("Asia/Jerusalem", "2024-03-29T00:00:00Z"), ("Asia/Jerusalem", "2024-10-26T23:00:00Z"),
]

Item = tuple  # ("plain", d) | ("range", a, b) | ("last", n) | ("lastw", n) | ("w", d)
#               | ("wd", w) | ("nth", w, k) | ("lastof", w)


# --- the independent definitions --------------------------------------------------

def month_days(d: date) -> int:
    return calendar.monthrange(d.year, d.month)[1]


def nearest_weekday(year: int, month: int, n: int) -> int | None:
    """The weekday of the month closest to day n (None when the month has no day n)."""
    ndays = calendar.monthrange(year, month)[1]
    if not 1 <= n <= ndays:
        return None
    weekdays = [c for c in range(max(1, n - 2), min(ndays, n + 2) + 1)
                if date(year, month, c).weekday() < 5]
    return min(weekdays, key=lambda c: abs(c - n))


def item_matches(item: Item, d: date) -> bool:
    kind = item[0]
    cron_weekday = d.isoweekday() % 7
    if kind == "plain":
        return d.day == item[1]
    if kind == "range":
        return item[1] <= d.day <= item[2]
    if kind == "last":
        return d.day == month_days(d) - item[1]
    if kind == "lastw":
        return d.day == nearest_weekday(d.year, d.month, month_days(d) - item[1])
    if kind == "w":
        return d.day == nearest_weekday(d.year, d.month, item[1])
    if kind == "wd":
        return cron_weekday == item[1] % 7
    if kind == "nth":
        return cron_weekday == item[1] % 7 and (d.day - 1) // 7 + 1 == item[2]
    assert kind == "lastof"
    return cron_weekday == item[1] % 7 and d.day + 7 > month_days(d)


def render(item: Item, names: bool) -> str:
    kind = item[0]
    if kind in ("plain", "wd"):
        return str(item[1])
    if kind == "range":
        return f"{item[1]}-{item[2]}"
    if kind == "last":
        return "L" if item[1] == 0 and names else f"L-{item[1]}"
    if kind == "lastw":
        return "LW" if item[1] == 0 and names else f"L-{item[1]}W"
    if kind == "w":
        return f"{item[1]}W"
    weekday = DAY_NAMES[item[1] % 7] if names else str(item[1])
    return f"{weekday}#{item[2]}" if kind == "nth" else f"{weekday}L"


def star_values(step: int, lo: int, hi: int) -> set[int]:
    return set(range(lo, hi + 1, step))


def day_fields(dom_items: list[Item] | None, dow_items: list[Item] | None, star_step: int,
               names: bool) -> tuple[str, str, Callable[[date], bool]]:
    """Render the two day fields (the side without items is ``*`` or ``*/step``)
    and the predicate both must meet."""
    star = "*" if star_step == 1 else f"*/{star_step}"
    if dom_items is not None:
        dom = ",".join(render(i, names) for i in dom_items)
        allowed = {v % 7 for v in star_values(star_step, 0, 7)}

        def pred(d: date) -> bool:
            return (d.isoweekday() % 7 in allowed
                    and any(item_matches(i, d) for i in dom_items))
        return dom, star, pred
    assert dow_items is not None
    dow = ",".join(render(i, names) for i in dow_items)
    days = star_values(star_step, 1, 31)

    def pred2(d: date) -> bool:
        return d.day in days and any(item_matches(i, d) for i in dow_items)
    return star, dow, pred2


# --- strategies -----------------------------------------------------------------

dom_form = st.one_of(
    st.integers(0, 30).map(lambda n: ("last", n)),
    st.integers(0, 30).map(lambda n: ("lastw", n)),
    st.integers(1, 31).map(lambda n: ("w", n)),
)
dom_plain = st.one_of(
    st.integers(1, 31).map(lambda n: ("plain", n)),
    st.tuples(st.integers(1, 31), st.integers(1, 31)).map(
        lambda p: ("range", min(p), max(p))),
)
dow_form = st.one_of(
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda p: ("nth", *p)),
    st.integers(0, 7).map(lambda w: ("lastof", w)),
)
dow_plain = st.integers(0, 7).map(lambda w: ("wd", w))


@st.composite
def day_spec(draw) -> tuple[str, str, Callable[[date], bool]]:
    star_step = draw(st.sampled_from([1, 1, 1, 2, 3, 7]))
    names = draw(st.booleans())
    if draw(st.booleans()):
        items = [draw(dom_form)] + draw(st.lists(dom_form | dom_plain, max_size=2))
        return day_fields(items, None, star_step, names)
    items = [draw(dow_form)] + draw(st.lists(dow_form | dow_plain, max_size=2))
    return day_fields(None, items, star_step, names)


months = st.one_of(st.just("*"), st.lists(st.integers(1, 12), min_size=1, max_size=3,
                                          unique=True).map(lambda ms: ",".join(map(str, ms))))


def month_set(text: str) -> set[int]:
    return set(range(1, 13)) if text == "*" else {int(m) for m in text.split(",")}


# --- fire dates against a walk over days (UTC) ------------------------------------

@settings(SETTINGS, max_examples=400)
@given(spec=day_spec(), month=months, hour=st.integers(0, 23), minute=st.integers(0, 59),
       start=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2090, 1, 1),
                          timezones=st.just(UTC)))
def test_fire_days_match_the_definitions(spec, month, hour, minute, start):
    dom, dow, pred = spec
    s = build(f"{minute} {hour} {dom} {month} {dow}", "UTC")
    allowed_months = month_set(month)
    horizon = start + timedelta(days=366 * 60)
    expected: list[datetime] = []
    d = start.date()
    while len(expected) < 6 and d <= horizon.date():
        if d.month in allowed_months and pred(d):
            t = datetime(d.year, d.month, d.day, hour, minute, tzinfo=UTC)
            if t > start:
                expected.append(t)
        d += timedelta(days=1)
    assert [t for t in sequence_n(s, start, 6) if t <= horizon] == expected


def sequence_n(s, start: datetime, n: int) -> list[datetime]:
    out, t = [], start
    for _ in range(n):
        t = s.next_after(t)
        if t is None:
            break
        out.append(t)
    return out


# --- around real offset changes, on the change day itself -------------------------

def forms_for(d: date) -> list[Item]:
    """Every day-form item that selects the date ``d``."""
    ndays = month_days(d)
    out: list[Item] = [("last", ndays - d.day)]
    if d.day + 7 > ndays:
        out += [("lastof", d.isoweekday() % 7)]
    out += [("nth", d.isoweekday() % 7, (d.day - 1) // 7 + 1)]
    if d.isoweekday() % 7 == 0:
        out += [("nth", 7, (d.day - 1) // 7 + 1)]
    for n in range(max(1, d.day - 2), min(ndays, d.day + 2) + 1):
        if nearest_weekday(d.year, d.month, n) == d.day:
            out += [("w", n)]
            if ndays - n <= 30:
                out += [("lastw", ndays - n)]
    return [i for i in out if i[0] not in ("last", "lastw") or i[1] <= 30]


@st.composite
def on_change_day(draw):
    zone_name, text = draw(st.sampled_from(FORM_TRANSITIONS))
    change = instant(text)
    zone = load_zone(zone_name)
    # The gap lies on the date after the change, a repeat on the date before it.
    local = draw(st.sampled_from([change, change - timedelta(seconds=1)])).astimezone(zone)
    item = draw(st.sampled_from(forms_for(local.date())))
    extra = draw(st.lists(dom_form if item[0] in ("last", "lastw", "w") else dow_form,
                          max_size=1))
    items = [item, *extra]
    is_dom = item[0] in ("last", "lastw", "w")
    dom, dow, pred = day_fields(items if is_dom else None, None if is_dom else items,
                                draw(st.sampled_from([1, 1, 2])), draw(st.booleans()))
    near = sorted({(local.hour + k) % 24 for k in (-2, -1, 0, 1, 2)})
    hour = draw(st.sampled_from(["*", "*/2", *map(str, near),
                                 f"{near[1]},{near[2]}", f"{near[1]}-{near[3]}"]))
    minute = draw(st.sampled_from(["0", "30", "0,30", "15,45", "*/20", "59", "*/7"]))
    dst = draw(dst_overrides)
    start = change - timedelta(hours=13) + timedelta(seconds=draw(st.integers(-600, 600)))
    return zone_name, f"{minute} {hour} {dom} * {dow}", dst, start, pred


@settings(SETTINGS, max_examples=150)
@given(on_change_day(), st.lists(st.integers(-2400, 2400), max_size=6))
def test_change_day_fires_match_the_minute_oracle(case, offsets):
    zone_name, expr, dst, since, pred = case
    s = build(expr, zone_name, dst)
    until = since + timedelta(hours=26)
    expected = oracle(s, since, until, 60, day_matches=pred)
    assert sequence(s, since, until) == expected, (zone_name, expr, dst)
    middle = since + timedelta(hours=13)
    for offset in offsets:
        t = middle + timedelta(seconds=offset)
        later = [f for f in expected if f > t]
        got = s.next_after(t)
        assert got == later[0] if later else (got is None or got > until)


# --- general properties ---------------------------------------------------------

@settings(SETTINGS, max_examples=150)
@given(spec=day_spec(), month=months, zone=st.sampled_from(ZONES), dst=dst_overrides,
       hour=st.sampled_from(["*", "*/5", "0", "2", "1-3", "23"]),
       start=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2090, 1, 1),
                          timezones=st.just(UTC)), data=st.data())
def test_fires_increase_and_none_is_skipped_from_between(spec, month, zone, dst, hour, start,
                                                         data):
    dom, dow, pred = spec
    s = build(f"{data.draw(st.sampled_from(['0', '30', '*/15']))} {hour} {dom} {month} {dow}",
              zone, dst)
    fires = sequence_n(s, start, 6)
    local_zone = load_zone(zone)
    for a, b in zip(fires, fires[1:], strict=False):
        assert a < b
        t = a + timedelta(microseconds=data.draw(st.integers(0, int((b - a) / timedelta(
            microseconds=1)) - 1)))
        assert s.next_after(t) == b
    for f in fires:
        # A fire's local date is a selected day, except a gap shifted past midnight.
        local = f.astimezone(local_zone)
        before = (f - timedelta(seconds=1)).astimezone(local_zone)
        assert pred(local.date()) or (before.utcoffset() != local.utcoffset()
                                      and pred(before.date()))
    assume(fires)
