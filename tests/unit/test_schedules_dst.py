"""Cron schedules across DST changes (SPEC §3, Vixie cron rules, ``dst`` override).

Expected times are written as local wall-clock time with the UTC offset in
force, so each case reads like the rule it checks.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronman.schedules import load_zone, parse_schedule

CREATED = datetime(2020, 1, 1, tzinfo=UTC)


def fires(cron: str, tz: str, since: str, until: str, dst: dict | None = None) -> list[str]:
    """Fire times in (since, until] rendered in local time with their offset."""
    spec = {"kind": "cron", "cron": cron, "timezone": tz}
    if dst is not None:
        spec["dst"] = dst
    s = parse_schedule(spec, job_id="dst-test", created_at=CREATED)
    zone = load_zone(tz)
    t = datetime.fromisoformat(since).astimezone(UTC)
    end = datetime.fromisoformat(until).astimezone(UTC)
    out = []
    while True:
        nxt = s.next_after(t)
        assert nxt is not None and nxt > t
        if nxt > end:
            return out
        out.append(nxt.astimezone(zone).isoformat())
        t = nxt


# --- America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT; 2024-11-03 02:00 EDT -> 01:00 EST

NY = "America/New_York"
NY_SPRING = ("2024-03-10T00:00:00-05:00", "2024-03-10T05:00:00-04:00")
NY_FALL = ("2024-11-03T00:00:00-04:00", "2024-11-03T04:00:00-05:00")


def test_ny_fixed_time_in_gap_fires_at_end_of_gap():
    assert fires("30 2 * * *", NY, "2024-03-09T00:00:00-05:00", "2024-03-11T12:00:00-04:00") == [
        "2024-03-09T02:30:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00"]


def test_ny_fixed_time_in_gap_skip_override():
    assert fires("30 2 * * *", NY, "2024-03-09T00:00:00-05:00", "2024-03-11T12:00:00-04:00",
                 dst={"gap": "skip"}) == [
        "2024-03-09T02:30:00-05:00", "2024-03-11T02:30:00-04:00"]


def test_ny_several_gap_times_and_gap_end_fire_once():
    assert fires("0,30 2,3 * * *", NY, *NY_SPRING) == [
        "2024-03-10T03:00:00-04:00", "2024-03-10T03:30:00-04:00"]


def test_ny_star_hour_skips_the_missing_hour():
    assert fires("30 * * * *", NY, *NY_SPRING) == [
        "2024-03-10T00:30:00-05:00", "2024-03-10T01:30:00-05:00",
        "2024-03-10T03:30:00-04:00", "2024-03-10T04:30:00-04:00"]


def test_ny_star_hour_gap_shift_override():
    assert fires("30 * * * *", NY, *NY_SPRING, dst={"gap": "shift"}) == [
        "2024-03-10T00:30:00-05:00", "2024-03-10T01:30:00-05:00", "2024-03-10T03:00:00-04:00",
        "2024-03-10T03:30:00-04:00", "2024-03-10T04:30:00-04:00"]


def test_ny_step_hour_is_wildcard():
    assert fires("30 */2 * * *", NY, *NY_SPRING) == [
        "2024-03-10T00:30:00-05:00", "2024-03-10T04:30:00-04:00"]


def test_ny_star_minute_with_fixed_hour_is_wildcard():
    # Vixie's MIN_STAR: "*/15 2 * * *" does not run on spring-forward day...
    assert fires("*/15 2 * * *", NY, *NY_SPRING) == []
    # ...unless told to shift: all four gap times become one fire.
    assert fires("*/15 2 * * *", NY, *NY_SPRING, dst={"gap": "shift"}) == [
        "2024-03-10T03:00:00-04:00"]
    # And it runs in both passes of the repeated hour.
    assert fires("*/30 1 * * *", NY, *NY_FALL) == [
        "2024-11-03T01:00:00-04:00", "2024-11-03T01:30:00-04:00",
        "2024-11-03T01:00:00-05:00", "2024-11-03T01:30:00-05:00"]


def test_ny_fixed_time_in_repeat_fires_at_first_occurrence():
    assert fires("30 1 * * *", NY, "2024-11-02T00:00:00-04:00", "2024-11-04T12:00:00-05:00") == [
        "2024-11-02T01:30:00-04:00", "2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"]


def test_ny_fixed_time_in_repeat_both_override():
    assert fires("30 1 * * *", NY, *NY_FALL, dst={"repeat": "both"}) == [
        "2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00"]


def test_ny_star_hour_fires_in_both_passes():
    assert fires("30 * * * *", NY, *NY_FALL) == [
        "2024-11-03T00:30:00-04:00", "2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00",
        "2024-11-03T02:30:00-05:00", "2024-11-03T03:30:00-05:00"]


def test_ny_star_hour_repeat_first_override():
    assert fires("30 * * * *", NY, *NY_FALL, dst={"repeat": "first"}) == [
        "2024-11-03T00:30:00-04:00", "2024-11-03T01:30:00-04:00",
        "2024-11-03T02:30:00-05:00", "2024-11-03T03:30:00-05:00"]


def test_ny_times_next_to_the_repeat_are_plain():
    assert fires("0 2 * * *", NY, *NY_FALL) == ["2024-11-03T02:00:00-05:00"]
    assert fires("0 1 * * *", NY, *NY_FALL) == ["2024-11-03T01:00:00-04:00"]
    assert fires("59 0 * * *", NY, *NY_FALL) == ["2024-11-03T00:59:00-04:00"]


@pytest.mark.parametrize("after, expected", [
    # t in the first pass: later first-pass matches, then the second pass.
    ("2024-11-03T01:40:00-04:00", "2024-11-03T01:50:00-04:00"),
    ("2024-11-03T01:50:00-04:00", "2024-11-03T01:00:00-05:00"),
    ("2024-11-03T01:30:00-04:00", "2024-11-03T01:40:00-04:00"),
    ("2024-11-03T01:59:59.999-04:00", "2024-11-03T01:00:00-05:00"),
    # t in the second pass.
    ("2024-11-03T01:00:00-05:00", "2024-11-03T01:10:00-05:00"),
    ("2024-11-03T01:55:00-05:00", "2024-11-03T02:00:00-05:00"),
])
def test_ny_next_after_from_inside_the_repeat(after, expected):
    s = parse_schedule({"kind": "cron", "cron": "*/10 * * * *", "timezone": NY},
                       job_id="x", created_at=CREATED)
    got = s.next_after(datetime.fromisoformat(after).astimezone(UTC))
    assert got == datetime.fromisoformat(expected)


@pytest.mark.parametrize("after, dst, expected", [
    ("2024-11-03T01:40:00-04:00", None, "2024-11-04T01:30:00-05:00"),
    ("2024-11-03T01:10:00-05:00", None, "2024-11-04T01:30:00-05:00"),
    ("2024-11-03T01:20:00-04:00", None, "2024-11-03T01:30:00-04:00"),
    ("2024-11-03T01:40:00-04:00", {"repeat": "both"}, "2024-11-03T01:30:00-05:00"),
    ("2024-11-03T01:10:00-05:00", {"repeat": "both"}, "2024-11-03T01:30:00-05:00"),
    ("2024-11-03T01:30:00-05:00", {"repeat": "both"}, "2024-11-04T01:30:00-05:00"),
])
def test_ny_fixed_job_from_inside_the_repeat(after, dst, expected):
    spec = {"kind": "cron", "cron": "30 1 * * *", "timezone": NY}
    if dst:
        spec["dst"] = dst
    s = parse_schedule(spec, job_id="x", created_at=CREATED)
    assert s.next_after(datetime.fromisoformat(after).astimezone(UTC)) == \
        datetime.fromisoformat(expected)


def test_ny_six_field_fixed_minute_with_every_second():
    # Fixed minute and hour, every second: the whole minute is in the gap and
    # becomes a single fire at 03:00:00.
    assert fires("* 30 2 * * *", NY, *NY_SPRING) == ["2024-03-10T03:00:00-04:00"]
    got = fires("*/20 30 1 * * *", NY, *NY_FALL)
    assert got == ["2024-11-03T01:30:00-04:00", "2024-11-03T01:30:20-04:00",
                   "2024-11-03T01:30:40-04:00"]


# --- Europe/Berlin: 2024-03-31 02:00 CET -> 03:00 CEST; 2024-10-27 03:00 CEST -> 02:00 CET

BER = "Europe/Berlin"
BER_SPRING = ("2024-03-31T00:00:00+01:00", "2024-03-31T05:00:00+02:00")
BER_FALL = ("2024-10-27T00:00:00+02:00", "2024-10-27T05:00:00+01:00")


def test_berlin_fixed_hour():
    assert fires("30 2 * * *", BER, *BER_SPRING) == ["2024-03-31T03:00:00+02:00"]
    assert fires("30 2 * * *", BER, *BER_SPRING, dst={"gap": "skip"}) == []
    assert fires("30 2 * * *", BER, *BER_FALL) == ["2024-10-27T02:30:00+02:00"]
    assert fires("30 2 * * *", BER, *BER_FALL, dst={"repeat": "both"}) == [
        "2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00"]
    assert fires("0 3 * * *", BER, *BER_FALL) == ["2024-10-27T03:00:00+01:00"]


def test_berlin_star_hour():
    assert fires("15 * * * *", BER, *BER_SPRING) == [
        "2024-03-31T00:15:00+01:00", "2024-03-31T01:15:00+01:00",
        "2024-03-31T03:15:00+02:00", "2024-03-31T04:15:00+02:00"]
    assert fires("15 * * * *", BER, *BER_FALL) == [
        "2024-10-27T00:15:00+02:00", "2024-10-27T01:15:00+02:00", "2024-10-27T02:15:00+02:00",
        "2024-10-27T02:15:00+01:00", "2024-10-27T03:15:00+01:00", "2024-10-27T04:15:00+01:00"]
    assert fires("15 * * * *", BER, *BER_FALL, dst={"repeat": "first"}) == [
        "2024-10-27T00:15:00+02:00", "2024-10-27T01:15:00+02:00", "2024-10-27T02:15:00+02:00",
        "2024-10-27T03:15:00+01:00", "2024-10-27T04:15:00+01:00"]
    assert fires("15 * * * *", BER, *BER_SPRING, dst={"gap": "shift", "repeat": "first"}) == [
        "2024-03-31T00:15:00+01:00", "2024-03-31T01:15:00+01:00", "2024-03-31T03:00:00+02:00",
        "2024-03-31T03:15:00+02:00", "2024-03-31T04:15:00+02:00"]


def test_berlin_morning_job_keeps_local_time_all_year():
    got = fires("0 7 * * *", BER, "2024-03-29T12:00:00+01:00", "2024-04-02T12:00:00+02:00")
    assert got == ["2024-03-30T07:00:00+01:00", "2024-03-31T07:00:00+02:00",
                   "2024-04-01T07:00:00+02:00", "2024-04-02T07:00:00+02:00"]


# --- Australia/Lord_Howe: 30-minute shifts.
# 2024-04-07 02:00 +11 -> 01:30 +10:30 (01:30-01:59 twice);
# 2024-10-06 02:00 +10:30 -> 02:30 +11 (02:00-02:29 missing).

LH = "Australia/Lord_Howe"
LH_FALL = ("2024-04-07T00:00:00+11:00", "2024-04-07T04:00:00+10:30")
LH_SPRING = ("2024-10-06T00:00:00+10:30", "2024-10-06T04:00:00+11:00")


def test_lord_howe_fixed_time_in_half_hour_gap():
    assert fires("15 2 * * *", LH, "2024-10-05T00:00:00+10:30", "2024-10-07T12:00:00+11:00") == [
        "2024-10-05T02:15:00+10:30", "2024-10-06T02:30:00+11:00", "2024-10-07T02:15:00+11:00"]
    assert fires("15 2 * * *", LH, *LH_SPRING, dst={"gap": "skip"}) == []
    assert fires("45 2 * * *", LH, *LH_SPRING) == ["2024-10-06T02:45:00+11:00"]


def test_lord_howe_star_hour_in_half_hour_gap():
    assert fires("15 * * * *", LH, *LH_SPRING) == [
        "2024-10-06T00:15:00+10:30", "2024-10-06T01:15:00+10:30", "2024-10-06T03:15:00+11:00"]
    assert fires("*/30 * * * *", LH, *LH_SPRING) == [
        "2024-10-06T00:30:00+10:30", "2024-10-06T01:00:00+10:30",
        "2024-10-06T01:30:00+10:30", "2024-10-06T02:30:00+11:00", "2024-10-06T03:00:00+11:00",
        "2024-10-06T03:30:00+11:00", "2024-10-06T04:00:00+11:00"]
    assert fires("15 * * * *", LH, *LH_SPRING, dst={"gap": "shift"}) == [
        "2024-10-06T00:15:00+10:30", "2024-10-06T01:15:00+10:30", "2024-10-06T02:30:00+11:00",
        "2024-10-06T03:15:00+11:00"]


def test_lord_howe_half_hour_repeat():
    assert fires("45 1 * * *", LH, *LH_FALL) == ["2024-04-07T01:45:00+11:00"]
    assert fires("45 1 * * *", LH, *LH_FALL, dst={"repeat": "both"}) == [
        "2024-04-07T01:45:00+11:00", "2024-04-07T01:45:00+10:30"]
    assert fires("15 1 * * *", LH, *LH_FALL, dst={"repeat": "both"}) == [
        "2024-04-07T01:15:00+11:00"]
    assert fires("45 * * * *", LH, *LH_FALL) == [
        "2024-04-07T00:45:00+11:00", "2024-04-07T01:45:00+11:00", "2024-04-07T01:45:00+10:30",
        "2024-04-07T02:45:00+10:30", "2024-04-07T03:45:00+10:30"]
    assert fires("*/30 * * * *", LH, *LH_FALL) == [
        "2024-04-07T00:30:00+11:00", "2024-04-07T01:00:00+11:00", "2024-04-07T01:30:00+11:00",
        "2024-04-07T01:30:00+10:30", "2024-04-07T02:00:00+10:30", "2024-04-07T02:30:00+10:30",
        "2024-04-07T03:00:00+10:30", "2024-04-07T03:30:00+10:30", "2024-04-07T04:00:00+10:30"]
    assert fires("*/30 * * * *", LH, *LH_FALL, dst={"repeat": "first"}) == [
        "2024-04-07T00:30:00+11:00", "2024-04-07T01:00:00+11:00", "2024-04-07T01:30:00+11:00",
        "2024-04-07T02:00:00+10:30", "2024-04-07T02:30:00+10:30", "2024-04-07T03:00:00+10:30",
        "2024-04-07T03:30:00+10:30", "2024-04-07T04:00:00+10:30"]


# --- zones with unusual changes -------------------------------------------------

def test_sao_paulo_midnight_gap_and_repeat_across_the_date_line():
    # 2018-11-04 00:00 -03 -> 01:00 -02: midnight does not exist that day.
    assert fires("@daily", "America/Sao_Paulo", "2018-11-03T12:00:00-03:00",
                 "2018-11-05T12:00:00-02:00") == [
        "2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"]
    # 2019-02-17 00:00 -02 -> 2019-02-16 23:00 -03: 23:xx of the 16th twice.
    assert fires("30 23 * * *", "America/Sao_Paulo", "2019-02-16T12:00:00-02:00",
                 "2019-02-17T12:00:00-03:00") == ["2019-02-16T23:30:00-02:00"]
    assert fires("30 * * * *", "America/Sao_Paulo", "2019-02-16T22:00:00-02:00",
                 "2019-02-17T01:00:00-03:00") == [
        "2019-02-16T22:30:00-02:00", "2019-02-16T23:30:00-02:00",
        "2019-02-16T23:30:00-03:00", "2019-02-17T00:30:00-03:00"]


def test_apia_skipped_a_whole_day():
    # Samoa jumped from 2011-12-29 24:00 (-10) to 2011-12-31 00:00 (+14).
    assert fires("0 12 * * *", "Pacific/Apia", "2011-12-28T12:00:00-10:00",
                 "2012-01-01T00:00:00+14:00") == [
        "2011-12-29T12:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"]
    assert fires("0 12 * * *", "Pacific/Apia", "2011-12-28T12:00:00-10:00",
                 "2012-01-01T00:00:00+14:00", dst={"gap": "skip"}) == [
        "2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"]
    assert fires("0 */6 * * *", "Pacific/Apia", "2011-12-29T12:00:00-10:00",
                 "2011-12-31T12:00:00+14:00") == [
        "2011-12-29T18:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T06:00:00+14:00",
        "2011-12-31T12:00:00+14:00"]


def test_fixed_offset_zones_take_no_dst_path():
    assert fires("0 7 * * *", "Etc/GMT+5", "2024-03-09T00:00:00-05:00",
                 "2024-03-11T00:00:00-05:00") == [
        "2024-03-09T07:00:00-05:00", "2024-03-10T07:00:00-05:00"]
    assert fires("0 7 * * *", "Etc/GMT-14", "2024-03-09T00:00:00+14:00",
                 "2024-03-10T00:00:00+14:00") == ["2024-03-09T07:00:00+14:00"]


def test_dst_zone_far_from_transitions_matches_plain_offset_arithmetic():
    got = fires("0 9 * * 1-5", NY, "2024-07-01T00:00:00-04:00", "2024-07-08T00:00:00-04:00")
    assert got == [f"2024-07-0{d}T09:00:00-04:00" for d in (1, 2, 3, 4, 5)]
