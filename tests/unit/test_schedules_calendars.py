"""Named exclusion calendars: validation, the JSON form, and which instants a
local date covers -- across DST changes in several zones."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronman.errors import ValidationError
from cronman.schedules import load_zone, parse_schedule
from cronman.schedules.calendars import MAX_DATES, ExclusionCalendar, parse_calendar
from cronman.timeutil import from_ms, to_ms
from tests.unit.test_schedules_property import SETTINGS, TRANSITIONS

CREATED = datetime(2020, 1, 1, tzinfo=UTC)


def ms(text: str) -> int:
    return to_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))


def calendar(tz: str, *dates: str) -> ExclusionCalendar:
    return parse_calendar({"name": "holidays", "timezone": tz, "dates": list(dates)})


def excluded_span(cal: ExclusionCalendar, first: str, last: str) -> tuple[str, str]:
    """The first excluded ms and the first ms after it that is not, in [first, last]."""
    lo, hi = ms(first), ms(last)
    step = 60_000
    t = lo
    while not cal.excludes(t):
        t += step
        assert t <= hi, "nothing excluded"
    start = t
    while cal.excludes(start - 1):  # refine to the millisecond
        start -= 1
    t = start
    while cal.excludes(t):
        t += step
        assert t <= hi, "no end"
    end = t
    while not cal.excludes(end - 1):
        end -= 1

    def iso(x: int) -> str:
        return from_ms(x).isoformat().replace("+00:00", "Z")
    return iso(start), iso(end)


# --- the JSON form ---------------------------------------------------------------

def test_parse_and_json_round_trip():
    cal = parse_calendar({"name": "de-holidays", "timezone": "Europe/Berlin",
                          "dates": ["2026-04-03", "--12-26", "--12-25", "2025-04-18",
                                    "--01-01", "2026-04-03"]})
    assert cal.name == "de-holidays" and cal.timezone == "Europe/Berlin"
    assert cal.dates == {date(2025, 4, 18), date(2026, 4, 3)}
    assert cal.yearly == {(1, 1), (12, 25), (12, 26)}
    stored = cal.to_dict()
    assert stored == {"name": "de-holidays", "timezone": "Europe/Berlin",
                      "dates": ["--01-01", "--12-25", "--12-26", "2025-04-18", "2026-04-03"]}
    assert parse_calendar(json.loads(json.dumps(stored))) == cal


def test_timezone_defaults_to_utc_and_dates_may_be_empty():
    cal = parse_calendar({"name": "none", "dates": []})
    assert cal.timezone == "UTC" and cal.to_dict()["dates"] == []
    assert not cal.excludes(ms("2026-01-01T00:00:00Z"))


def err(spec, **kw) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_calendar(spec, **kw)
    assert info.value.message
    return info.value


GOOD = {"name": "h", "timezone": "Europe/Berlin", "dates": ["2026-01-01"]}


@pytest.mark.parametrize("spec, field, words", [
    ([], "calendar", "object"), ("h", "calendar", "object"), (None, "calendar", "object"),
    ({**GOOD, "holidays": []}, "calendar.holidays", "unknown key"),
    ({"timezone": "UTC", "dates": []}, "calendar.name", "required"),
    ({**GOOD, "name": ""}, "calendar.name", "required"),
    ({**GOOD, "name": 7}, "calendar.name", "required"),
    ({**GOOD, "name": "bad name"}, "calendar.name", "letters"),
    ({**GOOD, "name": "-lead"}, "calendar.name", "starting"),
    ({**GOOD, "name": "x" * 129}, "calendar.name", "128"),
    ({**GOOD, "name": "caf\u00e9"}, "calendar.name", "letters"),
    ({**GOOD, "timezone": "Mars/Olympus"}, "calendar.timezone", "unknown time zone"),
    ({**GOOD, "timezone": "europe/berlin"}, "calendar.timezone", "unknown time zone"),
    ({**GOOD, "timezone": 1}, "calendar.timezone", "string"),
    ({**GOOD, "timezone": None}, "calendar.timezone", "string"),
    ({"name": "h"}, "calendar.dates", "required"),
    ({**GOOD, "dates": "2026-01-01"}, "calendar.dates", "list"),
    ({**GOOD, "dates": ["2026-01-01"] * (MAX_DATES + 1)}, "calendar.dates", "at most"),
])
def test_validation_names_the_field(spec, field, words):
    e = err(spec)
    assert e.field == field and words in e.message


@pytest.mark.parametrize("bad, words", [
    ("2026-02-30", "not a calendar date"), ("2026-13-01", "not a calendar date"),
    ("2025-02-29", "not a calendar date"), ("0000-01-01", "year"),
    ("--02-30", "no month has that day"), ("--13-01", "no month has that day"),
    ("--00-10", "no month has that day"), ("2026/01/01", "YYYY-MM-DD"),
    ("2026-1-1", "YYYY-MM-DD"), (" 2026-01-01", "YYYY-MM-DD"), ("--2-3", "--MM-DD"),
    ("12-25", "--MM-DD"), ("2026-01-01T00:00:00Z", "YYYY-MM-DD"), ("", "YYYY-MM-DD"),
    ("\u0662\u0660\u0662\u0666-01-01", "YYYY-MM-DD"), (20260101, "string"), (None, "string"),
])
def test_each_bad_date_is_named_by_its_index(bad, words):
    e = err({**GOOD, "dates": ["2026-01-01", "--12-25", "2026-05-01", bad]})
    assert e.field == "calendar.dates[3]" and words in e.message


def test_path_prefix_is_chosen_by_the_caller():
    assert err({**GOOD, "dates": [5]}, path="").field == "dates[0]"
    assert err({**GOOD, "dates": [5]}, path="calendars[2]").field == "calendars[2].dates[0]"
    assert err([], path="").field == ""


def test_direct_construction_checks_the_zone():
    with pytest.raises(ValidationError):
        ExclusionCalendar("h", "Nowhere/Land")


# --- which instants a local date covers ----------------------------------------------

def test_plain_day_in_utc():
    cal = calendar("UTC", "2026-05-01")
    assert excluded_span(cal, "2026-04-30T12:00:00Z", "2026-05-02T12:00:00Z") == (
        "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z")


@pytest.mark.parametrize("tz, day, span", [
    # Europe/Berlin: 23 hours on 2024-03-31 (02:00 -> 03:00), 25 on 2024-10-27.
    ("Europe/Berlin", "2024-03-31", ("2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z")),
    ("Europe/Berlin", "2024-10-27", ("2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z")),
    # America/New_York: 23 hours on 2024-03-10, 25 on 2024-11-03.
    ("America/New_York", "2024-03-10", ("2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z")),
    ("America/New_York", "2024-11-03", ("2024-11-03T04:00:00Z", "2024-11-04T05:00:00Z")),
    # Australia/Lord_Howe moves 30 minutes: 23.5 hours on 2024-10-06, 24.5 on 2024-04-07.
    ("Australia/Lord_Howe", "2024-10-06", ("2024-10-05T13:30:00Z", "2024-10-06T13:00:00Z")),
    ("Australia/Lord_Howe", "2024-04-07", ("2024-04-06T13:00:00Z", "2024-04-07T13:30:00Z")),
    # Midnight itself missing: Santiago's 2024-09-08 starts at 01:00 -03.
    ("America/Santiago", "2024-09-08", ("2024-09-08T04:00:00Z", "2024-09-09T03:00:00Z")),
    # Midnight twice: Havana's 2024-11-03 starts at the first 00:00 (-04).
    ("America/Havana", "2024-11-03", ("2024-11-03T04:00:00Z", "2024-11-04T05:00:00Z")),
    # Cairo: 2024-10-31 ends after the second 23:xx (24:00 EEST -> 23:00 EET).
    ("Africa/Cairo", "2024-10-31", ("2024-10-30T21:00:00Z", "2024-10-31T22:00:00Z")),
])
def test_a_local_date_across_a_dst_change(tz, day, span):
    cal = calendar(tz, day)
    d = date.fromisoformat(day)
    first = (datetime(d.year, d.month, d.day, tzinfo=UTC) - timedelta(days=1)).isoformat()
    last = (datetime(d.year, d.month, d.day, tzinfo=UTC) + timedelta(days=2)).isoformat()
    assert excluded_span(cal, first, last) == span


def test_both_passes_of_a_repeated_hour_are_on_the_date():
    cal = calendar("Europe/Berlin", "2024-10-27")
    assert cal.excludes(ms("2024-10-27T00:30:00Z"))  # 02:30 CEST
    assert cal.excludes(ms("2024-10-27T01:30:00Z"))  # 02:30 CET


def test_a_skipped_date_excludes_nothing():
    # Pacific/Apia went from 2011-12-29 23:59:59 -10 to 2011-12-31 00:00 +14.
    cal = calendar("Pacific/Apia", "2011-12-30")
    start = ms("2011-12-28T00:00:00Z")
    assert not any(cal.excludes(start + k * 600_000) for k in range(6 * 24 * 5))
    new_years_eve = calendar("Pacific/Apia", "2011-12-31")
    assert excluded_span(new_years_eve, "2011-12-29T00:00:00Z", "2012-01-02T00:00:00Z") == (
        "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z")


def test_yearly_dates_recur_and_feb_29_only_in_leap_years():
    cal = calendar("Europe/Berlin", "--12-25", "--02-29")
    assert cal.excludes(ms("2024-12-25T12:00:00Z")) and cal.excludes(ms("2031-12-25T12:00:00Z"))
    assert cal.excludes(ms("1969-12-25T12:00:00Z"))  # before the epoch too
    assert not cal.excludes(ms("2024-12-24T22:59:59.999Z"))
    assert cal.excludes(ms("2024-12-24T23:00:00Z"))  # 00:00 CET
    assert cal.excludes(ms("2024-02-29T12:00:00Z"))
    assert not cal.excludes(ms("2025-02-28T12:00:00Z"))
    assert not cal.excludes(ms("2025-03-01T12:00:00Z"))


def test_the_calendar_zone_decides_not_the_jobs():
    # 20:00 in New York on Dec 24 is already Dec 25 in Berlin.
    job = parse_schedule({"kind": "cron", "cron": "0 20 * * *", "timezone": "America/New_York"},
                         job_id="j", created_at=CREATED)
    fire = job.next_after(datetime(2024, 12, 24, 12, 0, tzinfo=UTC))
    assert fire == datetime(2024, 12, 25, 1, 0, tzinfo=UTC)
    assert calendar("Europe/Berlin", "--12-25").excludes(to_ms(fire))
    assert not calendar("America/New_York", "--12-25").excludes(to_ms(fire))


def test_filtering_a_schedule_with_a_calendar():
    job = parse_schedule({"kind": "cron", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
                         job_id="j", created_at=CREATED)
    cal = calendar("Europe/Berlin", "--12-24", "--12-25", "--12-26", "--01-01")
    kept, skipped = [], []
    t = job.next_after(datetime(2024, 12, 20, tzinfo=UTC))
    while t < datetime(2025, 1, 4, tzinfo=UTC):
        (skipped if cal.excludes(to_ms(t)) else kept).append(t.strftime("%m-%d"))
        t = job.next_after(t)
    assert skipped == ["12-24", "12-25", "12-26", "01-01"]
    assert kept == ["12-20", "12-23", "12-27", "12-30", "12-31", "01-02", "01-03"]


# --- property: a date's excluded instants are exactly that local day ----------------

ZONE_CHANGES = TRANSITIONS + [
    ("America/Santiago", "2024-09-08T04:00:00Z"), ("America/Havana", "2024-11-03T05:00:00Z"),
    ("Africa/Cairo", "2024-04-25T22:00:00Z"), ("Africa/Cairo", "2024-10-31T21:00:00Z"),
]


@settings(SETTINGS, max_examples=150)
@given(case=st.sampled_from(ZONE_CHANGES), shift=st.integers(-2, 2),
       yearly=st.booleans())
def test_excluded_instants_are_those_between_local_midnights(case, shift, yearly):
    """A ``0 0 * * *`` cron job fires at the first instant of each local date
    (a missing midnight shifts to the end of the gap, a repeated one fires at
    its first pass): a holiday excludes from its fire up to the next one."""
    zone_name, text = case
    zone = load_zone(zone_name)
    change = datetime.fromisoformat(text.replace("Z", "+00:00"))
    day = change.astimezone(zone).date() + timedelta(days=shift)
    entry = f"--{day.month:02d}-{day.day:02d}" if yearly else day.isoformat()
    cal = calendar(zone_name, entry)
    midnights = parse_schedule({"kind": "cron", "cron": "0 0 * * *", "timezone": zone_name},
                               job_id="m", created_at=CREATED)
    before = midnights.next_after(change + timedelta(days=shift - 3))
    start = midnights.next_after(before)
    while start.astimezone(zone).date() < day:
        before, start = start, midnights.next_after(start)
    if start.astimezone(zone).date() > day:  # a date the zone skipped (Apia 2011-12-30)
        assert not any(cal.excludes(t) for t in range(to_ms(before), to_ms(start), 60_000))
        return
    end = midnights.next_after(start)
    lo, hi = to_ms(start), to_ms(end)
    assert not cal.excludes(lo - 1) and cal.excludes(lo)
    assert cal.excludes(hi - 1) and not cal.excludes(hi)
    for k in range(1, 50):
        assert cal.excludes(lo + (hi - lo) * k // 50)
