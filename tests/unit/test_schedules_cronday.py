"""Quartz day forms in cron (``L``, ``L-n``, ``LW``, ``L-nW``, ``nW``, ``D#k``, ``DL``):
hand-worked cases.

Every expected date below was worked out from a calendar, and each is shown
with its weekday, so a reader can check it. 2024 is a leap year whose months
begin: Jan Mon, Feb Thu, Mar Fri, Apr Mon, May Wed, Jun Sat, Jul Mon, Aug Thu,
Sep Sun, Oct Tue, Nov Fri, Dec Sun.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronman.errors import ValidationError
from cronman.schedules import load_zone, parse_schedule

CREATED = datetime(2020, 1, 1, tzinfo=UTC)


def schedule(cron: str, tz: str = "UTC", dst: dict | None = None):
    spec: dict = {"kind": "cron", "cron": cron, "timezone": tz}
    if dst is not None:
        spec["dst"] = dst
    return parse_schedule(spec, job_id="cronday", created_at=CREATED)


def days(cron: str, after: str, n: int) -> list[str]:
    """The next ``n`` fire dates (UTC) as ``Fri 2024-03-29``."""
    s = schedule(cron)
    t = datetime.fromisoformat(after).replace(tzinfo=UTC)
    out = []
    for _ in range(n):
        t = s.next_after(t)
        assert t is not None
        out.append(t.strftime("%a %Y-%m-%d"))
    return out


def fires(cron: str, tz: str, since: str, until: str, dst: dict | None = None) -> list[str]:
    """Fire times in (since, until] in local time with their offset."""
    s = schedule(cron, tz, dst)
    zone = load_zone(tz)
    t = datetime.fromisoformat(since).astimezone(UTC)
    end = datetime.fromisoformat(until).astimezone(UTC)
    out = []
    while True:
        nxt = s.next_after(t)
        if nxt is None or nxt > end:
            return out
        assert nxt > t
        out.append(nxt.astimezone(zone).isoformat())
        t = nxt


# --- L and L-n: month ends, leap years ----------------------------------------

def test_last_day_of_month_through_a_leap_year():
    assert days("0 0 L * *", "2023-12-31T12:00", 6) == [
        "Wed 2024-01-31", "Thu 2024-02-29", "Sun 2024-03-31", "Tue 2024-04-30",
        "Fri 2024-05-31", "Sun 2024-06-30"]
    assert days("0 0 L 2 *", "2024-03-01T00:00", 4) == [
        "Fri 2025-02-28", "Sat 2026-02-28", "Sun 2027-02-28", "Tue 2028-02-29"]


def test_last_day_of_february_in_century_years():
    # 2100 is not a leap year, 2000 is (divisible by 400).
    assert days("0 0 L 2 *", "2100-01-01T00:00", 1) == ["Sun 2100-02-28"]
    assert days("0 0 L 2 *", "2000-01-01T00:00", 1) == ["Tue 2000-02-29"]


def test_last_day_minus_n():
    assert days("0 0 L-1 * *", "2024-01-01T00:00", 4) == [
        "Tue 2024-01-30", "Wed 2024-02-28", "Sat 2024-03-30", "Mon 2024-04-29"]
    assert days("0 0 L-1 2 *", "2024-03-01T00:00", 1) == ["Thu 2025-02-27"]
    assert days("0 0 L-0 * *", "2024-01-01T00:00", 1) == ["Wed 2024-01-31"]


def test_last_day_minus_30_only_in_31_day_months():
    assert days("0 0 L-30 * *", "2024-01-15T00:00", 6) == [
        "Fri 2024-03-01", "Wed 2024-05-01", "Mon 2024-07-01", "Thu 2024-08-01",
        "Tue 2024-10-01", "Sun 2024-12-01"]


def test_last_day_minus_28_in_february_only_in_leap_years():
    assert days("0 0 L-28 2 *", "2024-03-01T00:00", 2) == ["Tue 2028-02-01", "Sun 2032-02-01"]


def test_l_in_a_list_with_plain_days():
    assert days("0 0 1,15,L * *", "2024-01-10T00:00", 5) == [
        "Mon 2024-01-15", "Wed 2024-01-31", "Thu 2024-02-01", "Thu 2024-02-15",
        "Thu 2024-02-29"]


# --- LW and L-nW -----------------------------------------------------------------

def test_last_weekday_lw():
    # Mar 31 Sun -> Fri 29; Jun 30 Sun -> Fri 28; Aug 31 Sat -> Fri 30;
    # Nov 30 Sat -> Fri 29; Feb 29 Thu stays.
    assert days("0 0 LW * *", "2024-02-01T00:00", 10) == [
        "Thu 2024-02-29", "Fri 2024-03-29", "Tue 2024-04-30", "Fri 2024-05-31",
        "Fri 2024-06-28", "Wed 2024-07-31", "Fri 2024-08-30", "Mon 2024-09-30",
        "Thu 2024-10-31", "Fri 2024-11-29"]
    assert days("0 0 LW 2,5 *", "2025-01-01T00:00", 2) == ["Fri 2025-02-28", "Fri 2025-05-30"]


def test_last_weekday_in_a_non_leap_century_february():
    assert days("0 0 LW 2 *", "2100-01-01T00:00", 1) == ["Fri 2100-02-26"]  # 28th is a Sunday


def test_weekday_nearest_to_last_minus_n():
    # L-3: Jan 28 Sun -> Mon 29; Feb 26 Mon; Mar 28 Thu; Apr 27 Sat -> Fri 26.
    assert days("0 0 L-3W * *", "2024-01-01T00:00", 4) == [
        "Mon 2024-01-29", "Mon 2024-02-26", "Thu 2024-03-28", "Fri 2024-04-26"]


# --- nW ----------------------------------------------------------------------

def test_1w_on_a_saturday_is_monday_the_3rd_never_the_previous_month():
    # Jun 1 2024 Sat -> Mon 3 (not Fri May 31); Sep 1 Sun -> Mon 2; Dec 1 Sun -> Mon 2.
    assert days("0 0 1W * *", "2024-05-15T00:00", 8) == [
        "Mon 2024-06-03", "Mon 2024-07-01", "Thu 2024-08-01", "Mon 2024-09-02",
        "Tue 2024-10-01", "Fri 2024-11-01", "Mon 2024-12-02", "Wed 2025-01-01"]


def test_31w_never_crosses_into_the_next_month_and_skips_short_months():
    # Mar 31 Sun (the last day) -> Fri 29, not Mon Apr 1; Aug 31 Sat -> Fri 30;
    # Feb, Apr, Jun, Sep and Nov have no 31st: no fire there (as in Quartz).
    assert days("0 0 31W * *", "2024-01-01T00:00", 7) == [
        "Wed 2024-01-31", "Fri 2024-03-29", "Fri 2024-05-31", "Wed 2024-07-31",
        "Fri 2024-08-30", "Thu 2024-10-31", "Tue 2024-12-31"]


def test_nearest_weekday_in_the_middle_and_at_the_month_end():
    # 15th: Jun 15 Sat -> Fri 14; Sep 15 Sun -> Mon 16.
    assert days("0 0 15W 6,9 *", "2024-01-01T00:00", 2) == ["Fri 2024-06-14", "Mon 2024-09-16"]
    # 30th: Mar 30 Sat -> Fri 29; Jun 30 Sun and the last day -> Fri 28;
    # Sep 30 Mon; Nov 30 Sat -> Fri 29.
    assert days("0 0 30W 3,6,9,11 *", "2024-01-01T00:00", 4) == [
        "Fri 2024-03-29", "Fri 2024-06-28", "Mon 2024-09-30", "Fri 2024-11-29"]


def test_29w_in_february():
    # Feb 29: 2024 Thu; 2025-2027 none; 2028 Tue; 2032 Sun and the last day -> Fri 27.
    assert days("0 0 29W 2 *", "2024-01-01T00:00", 3) == [
        "Thu 2024-02-29", "Tue 2028-02-29", "Fri 2032-02-27"]


def test_several_w_items_that_land_on_the_same_day_fire_once():
    # Jun 2024: 1st Sat -> Mon 3, 2nd Sun -> Mon 3, 3rd is Mon 3.
    assert days("0 0 1W,2W,3W 6 *", "2024-05-01T00:00", 2) == [
        "Mon 2024-06-03", "Mon 2025-06-02"]


# --- D#k and DL ----------------------------------------------------------------

def test_third_friday_by_number_and_name():
    expected = ["Fri 2024-01-19", "Fri 2024-02-16", "Fri 2024-03-15", "Fri 2024-04-19"]
    assert days("0 0 * * 5#3", "2024-01-01T00:00", 4) == expected
    assert days("0 0 * * fri#3", "2024-01-01T00:00", 4) == expected
    assert days("0 0 * * FRI#3", "2024-01-01T00:00", 4) == expected


def test_fifth_weekday_only_in_months_that_have_one():
    # 2024 months with five Fridays: Mar, May, Aug, Nov.
    assert days("0 0 * * 5#5", "2024-01-01T00:00", 4) == [
        "Fri 2024-03-29", "Fri 2024-05-31", "Fri 2024-08-30", "Fri 2024-11-29"]


def test_fifth_monday_of_february_needs_a_leap_year_starting_on_monday():
    assert days("0 0 * 2 1#5", "2016-03-01T00:00", 1) == ["Mon 2044-02-29"]


def test_sunday_is_0_or_7_in_the_new_forms_too():
    first_sundays = ["Sun 2024-09-01", "Sun 2024-10-06", "Sun 2024-11-03", "Sun 2024-12-01"]
    assert days("0 0 * * 0#1", "2024-08-15T00:00", 4) == first_sundays
    assert days("0 0 * * 7#1", "2024-08-15T00:00", 4) == first_sundays
    assert days("0 0 * * 0L", "2024-03-01T00:00", 1) == days("0 0 * * 7L", "2024-03-01T00:00", 1)


def test_last_given_weekday_dl():
    assert days("0 0 * * 5L", "2024-01-01T00:00", 4) == [
        "Fri 2024-01-26", "Fri 2024-02-23", "Fri 2024-03-29", "Fri 2024-04-26"]
    assert days("0 0 * * sunL", "2024-03-01T00:00", 2) == ["Sun 2024-03-31", "Sun 2024-04-28"]


def test_nth_and_last_weekday_items_in_one_list():
    assert days("0 0 * * mon#1,fri#3,5L", "2023-12-31T00:00", 6) == [
        "Mon 2024-01-01", "Fri 2024-01-19", "Fri 2024-01-26", "Mon 2024-02-05",
        "Fri 2024-02-16", "Fri 2024-02-23"]
    assert days("0 0 * * 1-5,0#1", "2024-08-31T00:00", 2) == ["Sun 2024-09-01", "Mon 2024-09-02"]


# --- combining with the other day field ---------------------------------------

def test_star_prefixed_other_field_means_both_must_match():
    # */2: odd days. Third Fridays 2024: 19, 16, 15, 19, 17, 21, 19, 16, 20 -> odd ones.
    assert days("0 0 */2 * 5#3", "2024-01-01T00:00", 6) == [
        "Fri 2024-01-19", "Fri 2024-03-15", "Fri 2024-04-19", "Fri 2024-05-17",
        "Fri 2024-06-21", "Fri 2024-07-19"]
    # */2 in day-of-week: Sun, Tue, Thu, Sat. Last days: Jan 31 Wed (no), Feb 29 Thu,
    # Mar 31 Sun, Apr 30 Tue, May 31 Fri (no), Jun 30 Sun.
    assert days("0 0 L * */2", "2024-01-01T00:00", 4) == [
        "Thu 2024-02-29", "Sun 2024-03-31", "Tue 2024-04-30", "Sun 2024-06-30"]


def err(cron: str) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        schedule(cron)
    assert info.value.field == "cron"
    return info.value


@pytest.mark.parametrize("cron", [
    "0 0 L * 5#3", "0 0 1 * 5L", "0 0 L * fri", "0 0 15W * 1-5", "0 0 1,15 * mon#1",
    "0 0 LW * 0,6", "0 0 L,1 * sat#2",
])
def test_both_day_fields_restricted_with_a_new_form_is_refused(cron):
    message = err(cron).message
    assert "both restricted" in message and "must be *" in message


def test_vixie_or_rule_is_unchanged_for_plain_fields():
    # 13th or any Friday (Vixie cron): Sep 2024 Fridays 6, 13, 20, 27.
    assert days("0 0 13 * 5", "2024-09-01T00:00", 4) == [
        "Fri 2024-09-06", "Fri 2024-09-13", "Fri 2024-09-20", "Fri 2024-09-27"]


# --- validation ------------------------------------------------------------------

@pytest.mark.parametrize("cron, words", [
    ("0 0 L-31 * *", "offset 31"), ("0 0 L-3-1 * *", "not a valid item"),
    ("0 0 L/2 * *", "no ranges or steps"), ("0 0 1-L * *", "no ranges or steps"),
    ("0 0 LW-2 * *", "not a valid item"), ("0 0 W * *", "not a valid item"),
    ("0 0 0W * *", "out of range 1-31"), ("0 0 32W * *", "out of range 1-31"),
    ("0 0 1-5W * *", "day-of-month"), ("0 0 15W/2 * *", "day-of-month"),
    ("0 0 W15 * *", "day-of-month"), ("0 0 L-100 * *", "day-of-month"),
    ("0 0 * * 5#6", "must be 1-5"), ("0 0 * * 5#0", "must be 1-5"),
    ("0 0 * * 5#", "must be 1-5"), ("0 0 * * 5#3#1", "must be 1-5"),
    ("0 0 * * 5#10", "must be 1-5"), ("0 0 * * 8#1", "out of range 0-7"),
    ("0 0 * * #3", "one weekday"), ("0 0 * * 1-5#2", "one weekday"),
    ("0 0 * * */2L", "one weekday"), ("0 0 * * funL", "day-of-week"),
    ("0 0 * * L", "bare 'L'"), ("0 0 * * l", "bare 'L'"),
    ("0 0 * * ?", "Quartz"), ("0 0 ? * *", "Quartz"), ("0 0 ? * 5#3", "Quartz"),
    ("0 0 * * 5#1,", "empty item"), ("0 0 L,,1 * *", "empty item"),
    ("0 0 31W 2 *", "never"), ("0 0 30W 2 *", "never"), ("0 0 L-29 2 *", "never"),
    ("0 0 L-30 2,4,6 *", "never"), ("0 0 31W 4,6,9,11 *", "never"),
    ("0 0 L * 5#3", "both restricted"),
    ("L * * * *", "minute"), ("* * * * * 5#3 *", "got 7"),
])
def test_bad_new_forms_name_the_field_and_say_what_is_wrong(cron, words):
    assert words in err(cron).message


def test_error_gets_the_api_path():
    assert err("0 0 L-31 * *").prefixed("schedule").field == "schedule.cron"


def test_lowercase_and_six_fields_and_h():
    assert days("0 0 l * *", "2024-01-01T00:00", 1) == ["Wed 2024-01-31"]
    assert days("0 0 lw * *", "2024-03-01T00:00", 1) == ["Fri 2024-03-29"]
    assert days("0 0 15w * *", "2024-06-01T00:00", 1) == ["Fri 2024-06-14"]
    s = schedule("30 15 10 L * *")
    assert s.next_after(datetime(2024, 1, 1, tzinfo=UTC)) == datetime(
        2024, 1, 31, 10, 15, 30, tzinfo=UTC)
    h = schedule("H 9 * * 5L")
    t = h.next_after(datetime(2024, 1, 1, tzinfo=UTC))
    assert t.date().isoformat() == "2024-01-26" and t.hour == 9


# --- DST: the same rules as every cron job (gap: shift/skip; repeat: first/both) ----
#
# Europe/Berlin 2024-03-31 (Sun, the last day of March) 02:00 CET -> 03:00 CEST;
#   2024-10-27 (Sun, the last Sunday) 03:00 CEST -> 02:00 CET.
# America/New_York 2024-03-10 (second Sunday) 02:00 -> 03:00; 2024-11-03 (first
#   Sunday) 02:00 EDT -> 01:00 EST.
# Asia/Jerusalem 2024-03-29 (Fri, the last weekday, the last Friday) 02:00 -> 03:00.
# Africa/Cairo 2024-04-26 (Fri, the last Friday) 00:00 -> 01:00; 2024-10-31 (Thu,
#   the last day, the last Thursday) 24:00 EEST -> 23:00 EET.
# Australia/Lord_Howe 2024-04-07 (first Sunday) 02:00 +11 -> 01:30 +10:30;
#   2024-10-06 (first Sunday) 02:00 +10:30 -> 02:30 +11.

BERLIN, NY, JERUSALEM, CAIRO, LORD_HOWE = (
    "Europe/Berlin", "America/New_York", "Asia/Jerusalem", "Africa/Cairo",
    "Australia/Lord_Howe")


@pytest.mark.parametrize("cron, tz, since, until, shifted", [
    ("30 2 L 3 *", BERLIN, "2024-03-30T00:00+01:00", "2024-04-01T00:00+02:00",
     "2024-03-31T03:00:00+02:00"),
    ("30 2 L-2 3 *", JERUSALEM, "2024-03-28T00:00+02:00", "2024-03-30T00:00+03:00",
     "2024-03-29T03:00:00+03:00"),
    ("30 2 LW 3 *", JERUSALEM, "2024-03-28T00:00+02:00", "2024-03-30T00:00+03:00",
     "2024-03-29T03:00:00+03:00"),
    ("30 2 L-2W 3 *", JERUSALEM, "2024-03-28T00:00+02:00", "2024-03-30T00:00+03:00",
     "2024-03-29T03:00:00+03:00"),
    # 30th is a Saturday: W moves it back onto the change day.
    ("30 2 30W 3 *", JERUSALEM, "2024-03-28T00:00+02:00", "2024-03-31T00:00+03:00",
     "2024-03-29T03:00:00+03:00"),
    # 27th is a Saturday -> Friday 26th, whose 00:00-01:00 does not exist.
    ("30 0 27W 4 *", CAIRO, "2024-04-25T00:00+02:00", "2024-04-28T00:00+03:00",
     "2024-04-26T01:00:00+03:00"),
    ("30 2 * 3 0#5", BERLIN, "2024-03-30T00:00+01:00", "2024-04-01T00:00+02:00",
     "2024-03-31T03:00:00+02:00"),
    ("30 2 * 3 sun#2", NY, "2024-03-09T00:00-05:00", "2024-03-11T00:00-04:00",
     "2024-03-10T03:00:00-04:00"),
    ("15 2 * 10 0#1", LORD_HOWE, "2024-10-05T00:00+10:30", "2024-10-07T00:00+11:00",
     "2024-10-06T02:30:00+11:00"),
    ("30 2 * 3 0L", BERLIN, "2024-03-30T00:00+01:00", "2024-04-01T00:00+02:00",
     "2024-03-31T03:00:00+02:00"),
    ("30 2 * 3 5L", JERUSALEM, "2024-03-28T00:00+02:00", "2024-03-30T00:00+03:00",
     "2024-03-29T03:00:00+03:00"),
    ("30 0 * 4 friL", CAIRO, "2024-04-25T00:00+02:00", "2024-04-28T00:00+03:00",
     "2024-04-26T01:00:00+03:00"),
])
def test_fixed_time_in_a_gap_shifts_or_skips(cron, tz, since, until, shifted):
    assert fires(cron, tz, since, until) == [shifted]
    assert fires(cron, tz, since, until, dst={"gap": "skip"}) == []


def test_gap_skip_on_a_form_that_always_names_the_change_day_never_fires():
    # Berlin's clocks always change on the last Sunday of March, at 02:00.
    assert schedule("30 2 * 3 0L", BERLIN, {"gap": "skip"}).next_after(
        datetime(2024, 1, 1, tzinfo=UTC)) is None
    assert schedule("30 2 * 3 0L", BERLIN).next_after(
        datetime(2025, 1, 1, tzinfo=UTC)).astimezone(load_zone(BERLIN)).isoformat() == \
        "2025-03-30T03:00:00+02:00"


def test_gap_skip_moves_to_the_next_year():
    # 2025: Apr 27 is a Sunday -> Monday 28th, after Cairo's 2025 change (Apr 25).
    s = schedule("30 0 27W 4 *", CAIRO, {"gap": "skip"})
    nxt = s.next_after(datetime(2024, 4, 1, tzinfo=UTC))
    assert nxt.astimezone(load_zone(CAIRO)).isoformat() == "2025-04-28T00:30:00+03:00"


@pytest.mark.parametrize("cron, tz, since, until, first, second", [
    ("30 23 L 10 *", CAIRO, "2024-10-30T00:00+03:00", "2024-11-01T12:00+02:00",
     "2024-10-31T23:30:00+03:00", "2024-10-31T23:30:00+02:00"),
    ("30 2 L-4 10 *", BERLIN, "2024-10-26T00:00+02:00", "2024-10-28T00:00+01:00",
     "2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00"),
    ("30 23 LW 10 *", CAIRO, "2024-10-30T00:00+03:00", "2024-11-01T12:00+02:00",
     "2024-10-31T23:30:00+03:00", "2024-10-31T23:30:00+02:00"),
    ("30 23 31W 10 *", CAIRO, "2024-10-30T00:00+03:00", "2024-11-01T12:00+02:00",
     "2024-10-31T23:30:00+03:00", "2024-10-31T23:30:00+02:00"),
    ("30 23 * 10 thu#5", CAIRO, "2024-10-30T00:00+03:00", "2024-11-01T12:00+02:00",
     "2024-10-31T23:30:00+03:00", "2024-10-31T23:30:00+02:00"),
    ("30 1 * 11 0#1", NY, "2024-11-02T00:00-04:00", "2024-11-04T00:00-05:00",
     "2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00"),
    ("45 1 * 4 7#1", LORD_HOWE, "2024-04-06T00:00+11:00", "2024-04-08T00:00+10:30",
     "2024-04-07T01:45:00+11:00", "2024-04-07T01:45:00+10:30"),
    ("30 2 * 10 7L", BERLIN, "2024-10-26T00:00+02:00", "2024-10-28T00:00+01:00",
     "2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00"),
    ("30 23 * 10 4L", CAIRO, "2024-10-30T00:00+03:00", "2024-11-01T12:00+02:00",
     "2024-10-31T23:30:00+03:00", "2024-10-31T23:30:00+02:00"),
])
def test_fixed_time_in_a_repeat_fires_first_or_both(cron, tz, since, until, first, second):
    assert fires(cron, tz, since, until) == [first]
    assert fires(cron, tz, since, until, dst={"repeat": "both"}) == [first, second]


def test_w_moves_off_a_sunday_change_day():
    # Nov 3 2024 is New York's fall-back Sunday; 3W is Monday the 4th: one fire.
    assert fires("30 1 3W 11 *", NY, "2024-11-02T00:00-04:00", "2024-11-05T00:00-05:00",
                 dst={"repeat": "both"}) == ["2024-11-04T01:30:00-05:00"]


def test_wildcard_jobs_fire_in_every_real_hour_on_form_days():
    assert fires("*/20 * L 3 *", BERLIN, "2024-03-31T00:59+01:00", "2024-03-31T03:30+02:00") == [
        "2024-03-31T01:00:00+01:00", "2024-03-31T01:20:00+01:00", "2024-03-31T01:40:00+01:00",
        "2024-03-31T03:00:00+02:00", "2024-03-31T03:20:00+02:00"]
    assert fires("*/30 * * 10 0L", BERLIN, "2024-10-27T01:00+02:00",
                 "2024-10-27T03:00+01:00") == [
        "2024-10-27T01:30:00+02:00", "2024-10-27T02:00:00+02:00", "2024-10-27T02:30:00+02:00",
        "2024-10-27T02:00:00+01:00", "2024-10-27T02:30:00+01:00", "2024-10-27T03:00:00+01:00"]
