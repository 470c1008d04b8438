"""Property tests for schedules.

The cron search (field stepping in wall-clock time plus the DST resolution)
is checked against a brute-force oracle that walks every minute (or second)
of UTC around real offset changes and applies the documented rules directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cronman.schedules import JobTimes, load_zone, parse_schedule

CREATED = datetime(2020, 1, 1, tzinfo=UTC)
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (zone, instant of an offset change). Checked by test_transition_table.
TRANSITIONS = [
    ("America/New_York", "2024-03-10T07:00:00Z"), ("America/New_York", "2024-11-03T06:00:00Z"),
    ("Europe/Berlin", "2024-03-31T01:00:00Z"), ("Europe/Berlin", "2024-10-27T01:00:00Z"),
    ("Australia/Lord_Howe", "2024-10-05T15:30:00Z"),
    ("Australia/Lord_Howe", "2024-04-06T15:00:00Z"),
    ("America/Sao_Paulo", "2018-11-04T03:00:00Z"), ("America/Sao_Paulo", "2019-02-17T02:00:00Z"),
    ("Pacific/Chatham", "2024-04-06T14:00:00Z"), ("Pacific/Chatham", "2024-09-28T14:00:00Z"),
    ("Antarctica/Troll", "2024-03-31T01:00:00Z"), ("Antarctica/Troll", "2024-10-27T01:00:00Z"),
    ("Pacific/Apia", "2011-12-30T10:00:00Z"),
    ("Europe/Dublin", "2024-03-31T01:00:00Z"), ("Europe/Dublin", "2024-10-27T01:00:00Z"),
]
ZONES = sorted({z for z, _ in TRANSITIONS} | {"UTC", "Asia/Kolkata", "Etc/GMT-3"})


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_transition_table():
    for zone_name, text in TRANSITIONS:
        zone = load_zone(zone_name)
        t = instant(text)
        before = (t - timedelta(seconds=1)).astimezone(zone).utcoffset()
        assert before != t.astimezone(zone).utcoffset(), (zone_name, text)


# --- expression strategies -------------------------------------------------------

def field_item(lo: int, hi: int, values: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    steps = st.integers(1, hi)

    def ranged(pair: tuple[int, int]) -> str:
        a, b = sorted(pair)
        return f"{a}-{b}"

    return st.one_of(
        st.just("*"),
        steps.map(lambda n: f"*/{n}"),
        values.map(str),
        st.tuples(values, values).map(ranged),
        st.tuples(values, values, steps).map(lambda x: f"{ranged(x[:2])}/{x[2]}"),
        st.tuples(values, steps).map(lambda x: f"{x[0]}/{x[1]}"),
    )


def cron_field(lo: int, hi: int, values: st.SearchStrategy[int] | None = None,
               ) -> st.SearchStrategy[str]:
    item = field_item(lo, hi, values if values is not None else st.integers(lo, hi))
    return st.lists(item, min_size=1, max_size=3).map(",".join)


def expressions(hours: st.SearchStrategy[int], seconds: bool) -> st.SearchStrategy[str]:
    parts = [
        cron_field(0, 59, st.sampled_from([0, 1, 15, 29, 30, 31, 45, 59]) | st.integers(0, 59)),
        cron_field(0, 23, hours),
        cron_field(1, 31), cron_field(1, 12), cron_field(0, 7),
    ]
    if seconds:
        parts.insert(0, cron_field(0, 59, st.sampled_from([0, 1, 30, 59]) | st.integers(0, 59)))
    return st.tuples(*parts).map(" ".join)


dst_overrides = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"gap": st.sampled_from(["shift", "skip"]),
                                        "repeat": st.sampled_from(["first", "both"])}),
)


def build(expr: str, zone: str, dst: dict | None = None, job_id: str = "prop"):
    spec: dict = {"kind": "cron", "cron": expr, "timezone": zone}
    if dst is not None:
        spec["dst"] = dst
    try:
        return parse_schedule(spec, job_id=job_id, created_at=CREATED)
    except Exception as exc:  # an impossible day-of-month/month pair
        assume("never" not in str(exc))
        raise


# --- the oracle -----------------------------------------------------------------

def oracle(schedule, since: datetime, until: datetime, step: int,
           day_matches=None) -> list[datetime]:
    """Every fire in (since, until] by walking UTC in ``step`` seconds.

    ``day_matches(date)``, when given, decides the day fields instead of the
    parsed plain day sets (for the Quartz day forms, tested independently).
    """
    expr, zone = schedule.expr, schedule.zone
    minute, hour = expr.fields[1], expr.fields[2]
    wildcard = minute.startswith("*") or hour.startswith("*")
    dst = schedule.dst or {}
    shift = dst.get("gap", "skip" if wildcard else "shift") == "shift"
    both = dst.get("repeat", "both" if wildcard else "first") == "both"

    def matches(local: datetime) -> bool:
        if (local.second not in expr.seconds or local.minute not in expr.minutes
                or local.hour not in expr.hours or local.month not in expr.months):
            return False
        if day_matches is not None:
            return day_matches(local.date())
        dom = local.day in expr.days
        dow = local.isoweekday() % 7 in expr.weekdays
        return (dom and dow) if (expr.dom_star or expr.dow_star) else (dom or dow)

    out = []
    u = since.replace(microsecond=0) + timedelta(seconds=1)
    while int(u.timestamp()) % step:
        u += timedelta(seconds=1)
    prev = (u - timedelta(seconds=step)).astimezone(zone).utcoffset()
    while u <= until:
        lt = u.astimezone(zone)
        off = lt.utcoffset()
        local = lt.replace(tzinfo=None)
        fire = False
        if off > prev:
            # A gap begins exactly at u (all test transitions sit on whole minutes).
            assert (u - timedelta(seconds=1)).astimezone(zone).utcoffset() == prev
            if shift:
                g = local - (off - prev)
                while g < local and not fire:
                    fire = matches(g)
                    g += timedelta(seconds=step)
        if matches(local):
            ambiguous = lt.replace(fold=1 - lt.fold).utcoffset() != off
            if not ambiguous or lt.fold == 0 or both:
                fire = True
        if fire:
            out.append(u)
        prev = off
        u += timedelta(seconds=step)
    return out


def sequence(schedule, since: datetime, until: datetime) -> list[datetime]:
    out, t = [], since
    while True:
        t = schedule.next_after(t)
        if t is None or t > until:
            return out
        out.append(t)


@st.composite
def around_transition(draw, seconds: bool):
    zone_name, text = draw(st.sampled_from(TRANSITIONS))
    change = instant(text)
    local = change.astimezone(load_zone(zone_name))
    near = st.sampled_from(sorted({(local.hour + d) % 24 for d in (-2, -1, 0, 1, 2)}))
    hours = near | st.integers(0, 23)
    expr = draw(expressions(hours, seconds))
    dst = draw(dst_overrides)
    span = timedelta(minutes=50) if seconds else timedelta(hours=13)
    start = change - span + timedelta(seconds=draw(st.integers(-600, 600)))
    return zone_name, expr, dst, start, start + 2 * span


# Offsets (us) from the middle of the window: within 40 minutes of the change.
near_points = st.lists(st.integers(-2400 * 10**6, 2400 * 10**6), max_size=8)


def check_against_oracle(case, step: int, points: list[int]) -> None:
    zone_name, expr, dst, since, until = case
    s = build(expr, zone_name, dst)
    expected = oracle(s, since, until, step)
    assert sequence(s, since, until) == expected
    # next_after from arbitrary points near the change (inside a repeat too).
    middle = since + (until - since) / 2
    for p in points:
        t = middle + timedelta(microseconds=p)
        later = [f for f in expected if f > t]
        got = s.next_after(t)
        if later:
            assert got == later[0], t
        else:
            assert got is None or got > until


@settings(SETTINGS, max_examples=150)
@given(around_transition(seconds=False), near_points)
def test_matches_brute_force_around_offset_changes(case, points):
    check_against_oracle(case, 60, points)


@settings(SETTINGS, max_examples=25)
@given(around_transition(seconds=True), near_points)
def test_matches_brute_force_with_seconds_field(case, points):
    check_against_oracle(case, 1, points)


@st.composite
def near_change(draw):
    zone_name, text = draw(st.sampled_from(TRANSITIONS))
    change = instant(text)
    local = change.astimezone(load_zone(zone_name))
    hours = st.sampled_from(sorted({(local.hour + d) % 24 for d in (-1, 0, 1)}))
    minutes = st.sampled_from([0, 1, 15, 29, 30, 31, 44, 45, 59])
    expr = draw(expressions(hours, seconds=False)) if draw(
        st.booleans()) else "{} {} * * *".format(
        ",".join(map(str, draw(st.lists(minutes, min_size=1, max_size=3)))),
        ",".join(map(str, draw(st.lists(hours, min_size=1, max_size=3)))))
    return zone_name, expr, draw(dst_overrides), change


def check_points_near(s, change: datetime) -> None:
    since, until = change - timedelta(hours=2), change + timedelta(hours=2)
    expected = oracle(s, since, until, 60)
    points = [change + timedelta(seconds=d) for d in (-1, 0, 1)]
    points += [change + timedelta(minutes=m, seconds=17) for m in range(-95, 95, 7)]
    for t in points:
        later = [f for f in expected if f > t]
        got = s.next_after(t)
        if later:
            assert got == later[0], (s.to_dict(), t)
        else:
            assert got is None or got > until, (s.to_dict(), t)


@settings(SETTINGS, max_examples=100)
@given(near_change())
def test_next_after_from_points_near_a_change(case):
    zone_name, expr, dst, change = case
    check_points_near(build(expr, zone_name, dst), change)


DST_CHOICES = [None, {"gap": "shift"}, {"gap": "skip"}, {"repeat": "first"}, {"repeat": "both"}]


def test_next_after_grid_near_every_change():
    """Exhaustive small grid: simple expressions x every override x every change."""
    for zone_name, text in TRANSITIONS:
        change = instant(text)
        h = change.astimezone(load_zone(zone_name)).hour
        hour_fields = [str(h), f"{h},{(h + 1) % 24}", "*"]
        for minute in ("0", "0,30", "*/20"):
            for hour in hour_fields:
                for dst in DST_CHOICES:
                    check_points_near(build(f"{minute} {hour} * * *", zone_name, dst), change)


# --- general properties ----------------------------------------------------------

starts = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2090, 1, 1),
                      timezones=st.just(UTC))


@settings(SETTINGS, max_examples=120)
@given(expr=expressions(st.integers(0, 23), seconds=False), zone=st.sampled_from(ZONES),
       dst=dst_overrides, start=starts)
def test_cron_times_increase_strictly_and_are_deterministic(expr, zone, dst, start):
    s = build(expr, zone, dst)
    twin = build(expr, zone, dst)
    t, prev = start, start
    for _ in range(25):
        nxt = s.next_after(t)
        assert nxt == twin.next_after(t)
        if nxt is None:
            break
        assert nxt > prev and nxt.tzinfo is not None and nxt.utcoffset() == timedelta(0)
        assert nxt.microsecond == 0
        prev = t = nxt


@settings(SETTINGS, max_examples=150)
@given(expr=expressions(st.integers(0, 23), seconds=False),
       zone=st.sampled_from(ZONES), start=starts, data=st.data())
def test_no_fire_is_skipped_from_any_point_between_fires(expr, zone, start, data):
    s = build(expr, zone)
    f1 = s.next_after(start)
    assume(f1 is not None)
    f2 = s.next_after(f1)
    assume(f2 is not None)
    gap_us = int((f2 - f1) / timedelta(microseconds=1))
    t = f1 + timedelta(microseconds=data.draw(st.integers(0, gap_us - 1)))
    assert s.next_after(t) == f2
    # ...and going back a little before f1 finds f1 again.
    assert s.next_after(f1 - timedelta(microseconds=1)) == f1


@SETTINGS
@given(every_ms=st.integers(1, 10**10), anchor_ms=st.integers(0, 4 * 10**12),
       t_us=st.integers(0, 4 * 10**15))
def test_interval_arithmetic(every_ms, anchor_ms, t_us):
    every = every_ms // 1000 if every_ms % 1000 == 0 else every_ms / 1000
    anchor = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=anchor_ms)
    s = parse_schedule({"kind": "interval", "every": every,
                        "anchor": anchor.isoformat().replace("+00:00", "Z")},
                       job_id="i", created_at=CREATED)
    t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=t_us)
    nxt = s.next_after(t)
    step = timedelta(milliseconds=every_ms)
    assert nxt > t >= nxt - step
    assert (nxt - anchor) % step == timedelta(0)


@settings(SETTINGS, max_examples=150)
@given(expr=expressions(st.integers(0, 23), seconds=False), zone=st.sampled_from(ZONES),
       start=starts, window=st.tuples(st.integers(0, 40 * 86400), st.integers(0, 40 * 86400)),
       jitter=st.none() | st.floats(0, 3600), job_id=st.text(min_size=1, max_size=20))
def test_job_times_stay_inside_the_window(expr, zone, start, window, jitter, job_id):
    s = build(expr, zone, job_id=job_id)
    start_at = start + timedelta(seconds=window[0])
    end_at = start_at + timedelta(seconds=window[1])
    jt = JobTimes(s, job_id=job_id, start_at=start_at, end_at=end_at, jitter=jitter)
    got = jt.fire_times(start - timedelta(days=1), 30)
    assert all(start_at <= f <= end_at for f in got)
    assert got == sorted(set(got))
    if got:
        assert jt.fire_times_between(got[0], got[-1], 1000) == got
        assert jt.fire_times_between(start_at, end_at, len(got)) == got
        unbounded = JobTimes(s, job_id=job_id, start_at=None, end_at=None, jitter=None)
        assert unbounded.fire_times(start_at - timedelta(microseconds=1), 1) == got[:1]
    for f in got:
        off = jt.jitter_offset(f)
        assert off == JobTimes(s, job_id=job_id, start_at=None, end_at=None,
                               jitter=jitter).jitter_offset(f)
        assert timedelta(0) <= off and (off == timedelta(0) or off < timedelta(seconds=jitter))
        assert jt.due_at(f) == f + off


# --- identical across processes -------------------------------------------------

CASES = [
    ({"kind": "cron", "cron": "H H/10 * * * *", "timezone": "Europe/Berlin"}, "2024-03-30T00:00:00Z"),
    ({"kind": "cron", "cron": "30 1 * * *", "timezone": "America/New_York",
      "dst": {"repeat": "both"}}, "2024-11-01T00:00:00Z"),
    ({"kind": "cron", "cron": "*/20 * * * *", "timezone": "Australia/Lord_Howe"},
     "2024-04-06T14:00:00Z"),
    ({"kind": "cron", "cron": "0 0 13 * 5", "timezone": "Pacific/Chatham"},
     "2024-01-01T00:00:00Z"),
    ({"kind": "interval", "every": 0.75, "anchor": "2024-01-01T00:00:00.5Z"},
     "2024-06-01T00:00:00Z"),
    ({"kind": "once", "at": "2031-01-01T00:00:00.25+05:30"}, "2024-01-01T00:00:00Z"),
]

CHILD = """
import json, sys
from datetime import datetime, UTC
from cronman.schedules import JobTimes, parse_schedule
out = []
for spec, start in json.loads(sys.stdin.read()):
    s = parse_schedule(spec, job_id="cross-process", created_at=datetime(2024, 1, 1, tzinfo=UTC))
    jt = JobTimes(s, job_id="cross-process", start_at=None, end_at=None, jitter=45.5)
    t = datetime.fromisoformat(start.replace("Z", "+00:00"))
    seq = []
    for _ in range(40):
        t = jt.next_fire_after(t)
        if t is None:
            break
        seq.append([t.isoformat(), jt.due_at(t).isoformat()])
    out.append(seq)
print(json.dumps(out))
"""


def compute_in_subprocess(env_overrides: dict[str, str]) -> list:
    env = dict(os.environ, **env_overrides)
    proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(CASES),
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_identical_across_processes_and_host_settings():
    a = compute_in_subprocess({"PYTHONHASHSEED": "1", "TZ": "Pacific/Kiritimati"})
    b = compute_in_subprocess({"PYTHONHASHSEED": "4242", "TZ": "America/Los_Angeles",
                               "PYTHONTZPATH": ""})
    assert a == b
    assert all(len(seq) >= 1 for seq in a)
    assert len(a[0]) == 40
    # The child's values are the ones this process computes too.
    here = json.loads(json.dumps(a))
    for (spec, start), seq in zip(CASES, here, strict=True):
        s = parse_schedule(spec, job_id="cross-process", created_at=datetime(2024, 1, 1, tzinfo=UTC))
        jt = JobTimes(s, job_id="cross-process", start_at=None, end_at=None, jitter=45.5)
        first = jt.next_fire_after(instant(start))
        assert [first.isoformat(), jt.due_at(first).isoformat()] == seq[0]


@given(every_ms=st.integers(1, 10**10), anchor_ms=st.integers(-10**12, 4 * 10**12),
       at_ms=st.integers(-10**12, 4 * 10**12), window=st.booleans(), cron=st.booleans())
def test_next_fire_in_ms_agrees_with_the_datetime_form(every_ms, anchor_ms, at_ms, window, cron):
    """The scheduler's millisecond shortcut gives the same fire times as
    ``next_fire_after`` (interval arithmetic, windows, cron fallback)."""
    from cronman.schedules import CronSchedule, IntervalSchedule, JobTimes
    from cronman.schedules.cronexpr import cron_expr
    from cronman.timeutil import from_ms, to_ms

    schedule = (CronSchedule(cron_expr("*/7 * * * *", job_id=""), "UTC", None) if cron
                else IntervalSchedule(every_ms, anchor_ms))
    start = from_ms(anchor_ms + 5) if window else None
    end = from_ms(anchor_ms + 50 * every_ms) if window else None
    times = JobTimes(schedule, job_id="j", start_at=start, end_at=end, jitter=None)
    expected = times.next_fire_after(from_ms(at_ms))
    assert times.next_fire_ms_after(at_ms) == (None if expected is None else to_ms(expected))
    if not window and not cron:  # the compact form a scheduler holds
        from cronman.schedules.window import IntervalTimes

        compact = IntervalTimes(every_ms, anchor_ms)
        assert compact.next_fire_ms_after(at_ms) == times.next_fire_ms_after(at_ms)
        assert compact.next_fire_after(from_ms(at_ms)) == expected
        lo, hi = from_ms(at_ms), from_ms(at_ms + 5 * every_ms)
        assert compact.fire_times_between(lo, hi, 3) == times.fire_times_between(lo, hi, 3)
        assert compact.due_ms(at_ms) == at_ms and compact.schedule.to_dict() == schedule.to_dict()
