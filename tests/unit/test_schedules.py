"""Schedules: parsing, validation, once/interval/cron basics, window and jitter."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronman.errors import ValidationError
from cronman.models import Job
from cronman.schedules import CronExpr, JobTimes, job_times, parse_schedule

CREATED = datetime(2026, 1, 15, 10, 20, 30, 456789, tzinfo=UTC)


def dt(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def parse(spec: dict, job_id: str = "job-1"):
    return parse_schedule(spec, job_id=job_id, created_at=CREATED)


def seq(schedule, after: str, n: int) -> list[str]:
    out, t = [], dt(after)
    for _ in range(n):
        t = schedule.next_after(t)
        if t is None:
            break
        out.append(t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond // 1000:03d}"
                                                       if t.microsecond else "") + "Z")
    return out


def cron(text: str, tz: str = "UTC", **extra):
    return parse({"kind": "cron", "cron": text, "timezone": tz, **extra})


# --- once ------------------------------------------------------------------

def test_once_fires_once_and_keeps_milliseconds():
    s = parse({"kind": "once", "at": "2026-11-13T05:13:22.123456+01:00"})
    assert s.kind == "once"
    assert s.to_dict() == {"kind": "once", "at": "2026-11-13T04:13:22.123Z"}
    assert s.next_after(dt("2026-01-01T00:00:00Z")) == dt("2026-11-13T04:13:22.123Z")
    assert s.next_after(dt("2026-11-13T04:13:22.122999Z")) == dt("2026-11-13T04:13:22.123Z")
    assert s.next_after(dt("2026-11-13T04:13:22.123Z")) is None
    assert s.next_after(dt("2027-01-01T00:00:00Z")) is None


def test_once_in_the_past_is_accepted_here():
    assert parse({"kind": "once", "at": "2001-01-01T00:00:00Z"}).next_after(
        dt("2000-01-01T00:00:00Z")) == dt("2001-01-01T00:00:00Z")


# --- interval --------------------------------------------------------------

def test_interval_default_anchor_is_creation_truncated_to_second():
    s = parse({"kind": "interval", "every": 300})
    assert s.to_dict() == {"kind": "interval", "every": 300, "anchor": "2026-01-15T10:20:30Z"}
    assert seq(s, "2026-01-15T10:20:30.456Z", 3) == [
        "2026-01-15T10:25:30Z", "2026-01-15T10:30:30Z", "2026-01-15T10:35:30Z"]


def test_interval_anchor_in_future_and_past_both_work():
    future = parse({"kind": "interval", "every": 60, "anchor": "2030-01-01T00:00:10Z"})
    assert seq(future, "2026-01-01T00:00:00Z", 2) == ["2026-01-01T00:00:10Z",
                                                      "2026-01-01T00:01:10Z"]
    past = parse({"kind": "interval", "every": 60, "anchor": "1999-01-01T00:00:10Z"})
    assert seq(past, "2026-01-01T00:00:00Z", 2) == seq(future, "2026-01-01T00:00:00Z", 2)


def test_interval_is_strictly_after_and_exact_on_boundaries():
    s = parse({"kind": "interval", "every": 10, "anchor": "2026-01-01T00:00:00Z"})
    assert s.next_after(dt("2026-01-01T00:00:10Z")) == dt("2026-01-01T00:00:20Z")
    assert s.next_after(dt("2026-01-01T00:00:09.999999Z")) == dt("2026-01-01T00:00:10Z")
    assert s.next_after(dt("2026-01-01T00:00:10.000001Z")) == dt("2026-01-01T00:00:20Z")
    assert s.next_after(dt("1969-12-31T23:59:55Z")) == dt("1970-01-01T00:00:00Z")


def test_interval_fractional_seconds_in_milliseconds():
    s = parse({"kind": "interval", "every": 0.25, "anchor": "2026-01-01T00:00:00.1Z"})
    assert s.to_dict() == {"kind": "interval", "every": 0.25, "anchor": "2026-01-01T00:00:00.1Z"}
    assert seq(s, "2026-01-01T00:00:00Z", 3) == [
        "2026-01-01T00:00:00.100Z", "2026-01-01T00:00:00.350Z", "2026-01-01T00:00:00.600Z"]
    assert parse({"kind": "interval", "every": 0.1}).to_dict()["every"] == 0.1
    assert parse({"kind": "interval", "every": 0.001}).next_after(
        dt("2026-01-01T00:00:00.0005Z")) == dt("2026-01-01T00:00:00.001Z")
    assert parse({"kind": "interval", "every": 2.0}).to_dict()["every"] == 2


def test_interval_whole_milliseconds_at_any_size():
    """k * 0.001 (the OpenAPI multipleOf) is a whole number of ms however large;
    half a millisecond never is."""
    for k in (1, 3, 1_234_567_891, 3_000_000_000_123, 3_162_240_000_000):
        every = k * 0.001
        assert parse({"kind": "interval", "every": every}).to_dict()["every"] == \
            pytest.approx(every)
    for every in (0.0005, 1.0005, 123456.7895):
        with pytest.raises(ValidationError, match="whole number of milliseconds"):
            parse({"kind": "interval", "every": every})


def test_interval_anchor_truncated_to_millisecond():
    s = parse({"kind": "interval", "every": 1, "anchor": "2026-01-01T00:00:00.1239Z"})
    assert s.to_dict()["anchor"] == "2026-01-01T00:00:00.123Z"


# --- cron basics -------------------------------------------------------------

def test_cron_every_five_minutes_utc_default_timezone():
    s = parse({"kind": "cron", "cron": "*/5 * * * *"})
    assert s.to_dict() == {"kind": "cron", "cron": "*/5 * * * *", "timezone": "UTC"}
    assert seq(s, "2026-01-01T00:03:00Z", 3) == [
        "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:15:00Z"]
    assert s.next_after(dt("2026-01-01T00:05:00Z")) == dt("2026-01-01T00:10:00Z")
    assert s.next_after(dt("2026-01-01T00:04:59.999Z")) == dt("2026-01-01T00:05:00Z")


def test_cron_in_berlin():
    s = cron("0 7 * * *", "Europe/Berlin")
    assert seq(s, "2026-01-01T00:00:00Z", 1) == ["2026-01-01T06:00:00Z"]
    assert seq(s, "2026-07-01T00:00:00Z", 1) == ["2026-07-01T05:00:00Z"]


def test_cron_to_dict_keeps_dst_only_when_given():
    assert "dst" not in cron("0 7 * * *").to_dict()
    s = cron("0 7 * * *", "Europe/Berlin", dst={"gap": "skip"})
    assert s.to_dict() == {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin",
                           "dst": {"gap": "skip"}}
    again = parse(s.to_dict())
    assert again.to_dict() == s.to_dict()


@pytest.mark.parametrize("macro, expanded", [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *"),
])
def test_macros(macro, expanded):
    assert seq(cron(macro), "2026-02-03T04:05:06Z", 5) == seq(cron(expanded),
                                                             "2026-02-03T04:05:06Z", 5)
    assert cron(macro).to_dict()["cron"] == macro


def test_six_fields_have_leading_seconds():
    s = cron("*/20 0 12 * * *")
    assert seq(s, "2026-01-01T00:00:00Z", 4) == [
        "2026-01-01T12:00:00Z", "2026-01-01T12:00:20Z", "2026-01-01T12:00:40Z",
        "2026-01-02T12:00:00Z"]


def test_names_sunday_seven_and_ranges_of_names():
    a = CronExpr("0 0 * jan-mar,DEC sat-7", job_id="j")
    assert a.months == {1, 2, 3, 12}
    assert a.weekdays == {6, 0}
    assert CronExpr("0 0 * * 7", job_id="j").weekdays == {0}
    assert CronExpr("0 0 * * 0-7/2", job_id="j").weekdays == {0, 2, 4, 6}
    assert CronExpr("0 0 * * */3", job_id="j").weekdays == {0, 3, 6}
    assert CronExpr("0 0 * * Mon-Fri", job_id="j").weekdays == {1, 2, 3, 4, 5}


def test_steps_lists_and_single_value_steps():
    e = CronExpr("5/20,7 1-10/3 * * *", job_id="j")
    assert e.minutes == {5, 25, 45, 7}
    assert e.hours == {1, 4, 7, 10}
    # A one-value range with a step is just that value (cronsim reads it as A/N).
    assert CronExpr("5-5/10 * * * *", job_id="j").minutes == {5}
    assert CronExpr("*/7 * * * *", job_id="j").minutes == set(range(0, 60, 7))


def test_dom_dow_or_rule_when_both_restricted():
    # 13th of the month OR a Friday.
    s = cron("0 0 13 * 5")
    assert seq(s, "2026-02-01T00:00:00Z", 5) == [
        "2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z",
        "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z"]
    assert "2026-03-13T00:00:00Z" in seq(s, "2026-03-07T00:00:00Z", 2)


def test_dom_dow_and_rule_when_one_starts_with_star():
    # "*/2" counts as unrestricted for the rule: odd days that are Mondays.
    s = cron("0 0 */2 * 1")
    for t in seq(s, "2026-01-01T00:00:00Z", 20):
        d = dt(t)
        assert d.weekday() == 0 and d.day % 2 == 1
    # dow "*" with dom restricted: only the 15th.
    assert seq(cron("0 0 15 * *"), "2026-01-01T00:00:00Z", 2) == [
        "2026-01-15T00:00:00Z", "2026-02-15T00:00:00Z"]
    # dow "*/3" (Sun, Wed, Sat) AND dom 1-7.
    for t in seq(cron("0 0 1-7 * */3"), "2026-01-01T00:00:00Z", 30):
        d = dt(t)
        assert d.day <= 7 and d.isoweekday() % 7 in (0, 3, 6)


def test_feb_29_and_rare_combinations():
    assert seq(cron("0 0 29 2 *"), "2026-01-01T00:00:00Z", 3) == [
        "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"]
    assert seq(cron("0 0 29 2 *"), "2096-03-01T00:00:00Z", 1) == ["2104-02-29T00:00:00Z"]
    # Feb 1st on a Monday (AND rule: dom "*/31" -> {1}).
    assert seq(cron("0 0 */31 2 1"), "2026-01-01T00:00:00Z", 2) == [
        "2027-02-01T00:00:00Z", "2038-02-01T00:00:00Z"]


def test_end_of_time_gives_none():
    assert cron("0 0 1 1 *").next_after(dt("9999-06-01T00:00:00Z")) is None
    assert cron("0 0 29 2 *", "Europe/Berlin").next_after(dt("9997-01-01T00:00:00Z")) is None
    s = parse({"kind": "interval", "every": 86400 * 365, "anchor": "2026-01-01T00:00:00Z"})
    assert s.next_after(dt("9999-12-01T00:00:00Z")) is None


def test_naive_input_is_taken_as_utc_and_other_offsets_work():
    s = cron("0 7 * * *", "Europe/Berlin")
    assert s.next_after(datetime(2026, 1, 1)) == dt("2026-01-01T06:00:00Z")
    plus2 = datetime.fromisoformat("2026-01-01T08:00:00+02:00")
    for tz in ("UTC", "Etc/GMT-1", "Europe/Berlin"):
        got = cron("0 7 * * *", tz).next_after(plus2)
        assert got.utcoffset() == timedelta(0) and got > plus2
    assert cron("0 7 * * *").next_after(plus2) == dt("2026-01-01T07:00:00Z")
    assert cron("0 7 * * *", "Etc/GMT-1").next_after(plus2) == dt("2026-01-02T06:00:00Z")


def test_edges_of_the_datetime_range_give_none():
    for tz in ("Pacific/Kiritimati", "America/New_York", "Etc/GMT+12"):
        assert cron("0 * * * *", tz).next_after(dt("9999-12-31T23:00:00Z")) is None


# --- H -----------------------------------------------------------------------

def test_h_is_stable_per_job_and_spreads_across_jobs():
    a1 = CronExpr("H H/15 * * * *", job_id="job-a")
    a2 = CronExpr("H H/15 * * * *", job_id="job-a")
    assert (a1.seconds, a1.minutes) == (a2.seconds, a2.minutes)
    assert len(a1.seconds) == 1 and len(a1.minutes) == 4
    (m0,) = [m for m in a1.minutes if m < 15]
    assert a1.minutes == {m0, m0 + 15, m0 + 30, m0 + 45}
    picks = {next(iter(CronExpr("H * * * *", job_id=f"job-{i}").minutes)) for i in range(200)}
    assert len(picks) > 40


def test_h_ranges_and_steps_stay_inside():
    for i in range(100):
        e = CronExpr("H(10-19) H(0-29)/10 * * * *", job_id=f"j{i}")
        (sec,) = e.seconds
        assert 10 <= sec <= 19
        assert len(e.minutes) == 3 and min(e.minutes) < 10 and max(e.minutes) <= 29
        assert max(e.minutes) - min(e.minutes) == 20
        e6 = CronExpr("H(5-6)/10 0 * * * *", job_id=f"j{i}")
        assert e6.seconds <= {5, 6} and len(e6.seconds) == 1


def test_h_known_value_is_pinned():
    # Changing the hash would move every H job in production: pin the values.
    e = CronExpr("H H/15 * * * *", job_id="pinned")
    assert e.seconds == {42} and e.minutes == {9, 24, 39, 54}
    assert CronExpr("H * * * *", job_id="pinned").minutes == {54}
    fires = seq(parse({"kind": "cron", "cron": "H * * * *"}, job_id="pinned"),
                "2026-01-01T00:00:00Z", 2)
    assert fires == ["2026-01-01T00:54:00Z", "2026-01-01T01:54:00Z"]


def test_h_uses_the_job_id():
    a = parse({"kind": "cron", "cron": "H * * * *"}, job_id="a")
    values = {parse({"kind": "cron", "cron": "H * * * *"}, job_id=f"x{i}").expr.minutes
              for i in range(50)}
    assert len(values) > 10
    assert a.to_dict()["cron"] == "H * * * *"


# --- validation --------------------------------------------------------------

def err(spec) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse(spec)
    return info.value


@pytest.mark.parametrize("spec, field", [
    ([], ""), ("cron", ""), (None, ""),
    ({}, "kind"), ({"kind": "weekly"}, "kind"), ({"kind": 5}, "kind"), ({"kind": ["x"]}, "kind"),
    ({"kind": "once", "at": "2026-01-01T00:00:00Z", "timezone": "UTC"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "every": 5}, "every"),
    ({"kind": "interval", "every": 5, "dst": {}}, "dst"),
    ({"kind": "once"}, "at"), ({"kind": "once", "at": None}, "at"),
    ({"kind": "once", "at": 1767225600}, "at"),
    ({"kind": "once", "at": "2026-01-01T00:00:00"}, "at"),
    ({"kind": "once", "at": "tomorrow"}, "at"), ({"kind": "once", "at": ""}, "at"),
    ({"kind": "interval"}, "every"), ({"kind": "interval", "every": 0}, "every"),
    ({"kind": "interval", "every": -5}, "every"), ({"kind": "interval", "every": "5"}, "every"),
    ({"kind": "interval", "every": True}, "every"),
    ({"kind": "interval", "every": float("nan")}, "every"),
    ({"kind": "interval", "every": float("inf")}, "every"),
    ({"kind": "interval", "every": 0.0001}, "every"),
    ({"kind": "interval", "every": 0.0015}, "every"),
    ({"kind": "interval", "every": 10**12}, "every"),
    ({"kind": "interval", "every": [5]}, "every"),
    ({"kind": "interval", "every": 5, "anchor": "2026-01-01"}, "anchor"),
    ({"kind": "interval", "every": 5, "anchor": 17}, "anchor"),
    ({"kind": "cron"}, "cron"), ({"kind": "cron", "cron": ""}, "cron"),
    ({"kind": "cron", "cron": "   "}, "cron"), ({"kind": "cron", "cron": 5}, "cron"),
    ({"kind": "cron", "cron": "* " * 300}, "cron"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": ""}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": 1}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": "localtime"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": "../../etc/passwd"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": "/etc/localtime"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "timezone": "europe/berlin"}, "timezone"),
    ({"kind": "cron", "cron": "* * * * *", "dst": "shift"}, "dst"),
    ({"kind": "cron", "cron": "* * * * *", "dst": {"gap": "later"}}, "dst.gap"),
    ({"kind": "cron", "cron": "* * * * *", "dst": {"gap": None}}, "dst.gap"),
    ({"kind": "cron", "cron": "* * * * *", "dst": {"repeat": "twice"}}, "dst.repeat"),
    ({"kind": "cron", "cron": "* * * * *", "dst": {"fold": 1}}, "dst.fold"),
])
def test_validation_names_the_field(spec, field):
    assert err(spec).field == field


@pytest.mark.parametrize("text, words", [
    ("* * * *", "got 4"), ("* * * * * * *", "got 7"),
    ("60 * * * *", "minute"), ("* 24 * * *", "hour"), ("* * 0 * *", "day-of-month"),
    ("* * 32 * *", "day-of-month"), ("* * * 13 *", "month"), ("* * * 0 *", "month"),
    ("* * * * 8", "day-of-week"), ("60 * * * * *", "second"),
    ("*/0 * * * *", "step"), ("* */25 * * *", "step"), ("* * * * */8", "step"),
    ("5-1 * * * *", "ends before"), ("* * * * mon-sun", "ends before"),
    ("1,,2 * * * *", "empty"), ("1, * * * *", "empty"), (",1 * * * *", "empty"),
    ("abc * * * *", "minute"), ("-5 * * * *", "minute"), ("5- * * * *", "minute"),
    ("1-2-3 * * * *", "minute"), ("*/ * * * *", "step"), ("*/-1 * * * *", "step"),
    ("jan * * * *", "minute"), ("* * * january *", "month"), ("+5 * * * *", "minute"),
    ("\u0663 * * * *", "minute"), ("*-5 * * * *", "minute"), ("/5 * * * *", "minute"),
    ("* H * * *", "hour"), ("* * H * *", "day-of-month"), ("* * * H *", "month"),
    ("* * * * H", "day-of-week"), ("H(50-10) * * * *", "ends before"),
    ("H(0-70) * * * *", "minute"), ("Hx * * * *", "minute"), ("H(1-2 * * * *", "minute"),
    ("L * * * *", "minute"), ("? * * * *", "minute"), ("* L * * *", "hour"),
    ("* * * L *", "month"), ("* * ? * *", "day-of-month"), ("* * * * ?", "day-of-week"),
    ("1#2 * * * *", "minute"), ("* * 15W-20 * *", "day-of-month"),
    ("@reboot", "macro"), ("@every 5m", "macro"), ("@", "macro"),
    ("0 0 31 2 *", "never"), ("0 0 30 2 *", "never"), ("0 0 31 4,6,9,11 *", "never"),
    ("0 0 30,31 2 */2", "never"),
])
def test_bad_cron_expressions(text, words):
    e = err({"kind": "cron", "cron": text})
    assert e.field == "cron"
    assert words in e.message


def test_or_rule_never_rejects_feb_31_with_weekday():
    # Both restricted: fires every Monday of February.
    assert seq(cron("0 0 31 2 mon"), "2026-01-01T00:00:00Z", 1) == ["2026-02-02T00:00:00Z"]


def test_prefixed_error_for_api_paths():
    e = err({"kind": "cron", "cron": "* * * * *", "dst": {"gap": "x"}})
    assert e.prefixed("jobs[1].schedule").field == "jobs[1].schedule.dst.gap"
    assert err([]).prefixed("schedule").field == "schedule"


# --- JobTimes ----------------------------------------------------------------

def make_times(spec, start=None, end=None, jitter=None, job_id="job-1") -> JobTimes:
    return JobTimes(parse(spec, job_id), job_id=job_id,
                    start_at=None if start is None else dt(start),
                    end_at=None if end is None else dt(end), jitter=jitter)


def test_window_is_inclusive_on_both_ends():
    jt = make_times({"kind": "cron", "cron": "0 * * * *"},
                    start="2026-01-01T03:00:00Z", end="2026-01-01T06:00:00Z")
    assert jt.next_fire_after(dt("2025-01-01T00:00:00Z")) == dt("2026-01-01T03:00:00Z")
    assert jt.fire_times(dt("2000-01-01T00:00:00Z"), 10) == [
        dt(f"2026-01-01T0{h}:00:00Z") for h in (3, 4, 5, 6)]
    assert jt.next_fire_after(dt("2026-01-01T06:00:00Z")) is None
    late_start = make_times({"kind": "cron", "cron": "0 * * * *"}, start="2026-01-01T03:00:00.001Z")
    assert late_start.next_fire_after(dt("2026-01-01T00:00:00Z")) == dt("2026-01-01T04:00:00Z")


def test_window_bounds_once_and_interval():
    once = make_times({"kind": "once", "at": "2026-05-01T00:00:00Z"}, end="2026-04-30T23:59:59Z")
    assert once.next_fire_after(dt("2026-01-01T00:00:00Z")) is None
    iv = make_times({"kind": "interval", "every": 60, "anchor": "2026-01-01T00:00:00Z"},
                    start="2026-01-01T00:00:30Z", end="2026-01-01T00:03:00Z")
    assert iv.fire_times(dt("2025-01-01T00:00:00Z"), 10) == [
        dt("2026-01-01T00:01:00Z"), dt("2026-01-01T00:02:00Z"), dt("2026-01-01T00:03:00Z")]


def test_fire_times_between_is_inclusive_and_limited():
    jt = make_times({"kind": "cron", "cron": "*/10 * * * *"})
    got = jt.fire_times_between(dt("2026-01-01T00:00:00Z"), dt("2026-01-01T01:00:00Z"), 100)
    assert got[0] == dt("2026-01-01T00:00:00Z") and got[-1] == dt("2026-01-01T01:00:00Z")
    assert len(got) == 7
    assert len(jt.fire_times_between(dt("2026-01-01T00:00:00Z"),
                                     dt("2026-01-01T01:00:00Z"), 3)) == 3
    assert jt.fire_times_between(dt("2026-01-01T00:00:01Z"),
                                 dt("2026-01-01T00:09:59Z"), 10) == []


def test_jitter_is_deterministic_and_bounded():
    jt = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=30)
    again = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=30)
    other = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=30, job_id="job-2")
    fires = jt.fire_times(dt("2026-01-01T00:00:00Z"), 500)
    offsets = [jt.jitter_offset(f) for f in fires]
    assert offsets == [again.jitter_offset(f) for f in fires]
    assert offsets != [other.jitter_offset(f) for f in fires]
    assert all(timedelta(0) <= o < timedelta(seconds=30) for o in offsets)
    assert all(o.microseconds % 1000 == 0 for o in offsets)
    assert max(offsets) > timedelta(seconds=25) and min(offsets) < timedelta(seconds=5)
    assert jt.due_at(fires[0]) == fires[0] + offsets[0]


def test_no_jitter_means_no_delay():
    for jitter in (None, 0, 0.0):
        jt = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=jitter)
        f = dt("2026-01-01T00:01:00Z")
        assert jt.jitter_offset(f) == timedelta(0) and jt.due_at(f) == f
    sub_ms = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=0.0004)
    assert sub_ms.jitter_offset(dt("2026-01-01T00:01:00Z")) == timedelta(0)


def test_jitter_pinned_value():
    # Replicas must agree across releases too: pin one offset.
    jt = make_times({"kind": "cron", "cron": "* * * * *"}, jitter=60, job_id="pinned")
    off = jt.jitter_offset(dt("2026-01-01T00:00:00Z"))
    import hashlib
    digest = hashlib.blake2b(b"pinned|1767225600000", digest_size=8,
                             person=b"cronman-jitter").digest()
    assert off == timedelta(milliseconds=int.from_bytes(digest, "big") % 60000)


def _job(**kw) -> Job:
    base = dict(id="job-x", namespace="ns", name="n", version=1,
                schedule={"kind": "cron", "cron": "0 * * * *", "timezone": "UTC"},
                target={}, retry={}, misfire={}, delivery="at_least_once", concurrency="allow",
                priority=0, start_at=None, end_at=None, jitter=None, paused=False, labels={},
                dead_letter=None, created_at=CREATED, updated_at=CREATED)
    base.update(kw)
    return Job(**base)


def test_job_times_caches_per_version_and_never_serves_stale():
    job = _job()
    a = job_times(job)
    assert job_times(job) is a
    assert job_times(replace(job)) is a
    changed = replace(job, schedule={"kind": "cron", "cron": "30 * * * *", "timezone": "UTC"})
    b = job_times(changed)
    assert b is not a
    assert b.next_fire_after(dt("2026-01-01T00:00:00Z")) == dt("2026-01-01T00:30:00Z")
    windowed = job_times(replace(job, version=2, end_at=dt("2025-01-01T00:00:00Z")))
    assert windowed.next_fire_after(dt("2026-01-01T00:00:00Z")) is None
    assert job_times(replace(job, version=3, jitter=5.0)).jitter == 5.0
