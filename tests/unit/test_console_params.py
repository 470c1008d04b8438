"""Pure parts of the console's API: relative times, the stats step, the
search's day slices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronman.api.run_search import STATS_MAX_STEPS, choose_step, stats_window
from cronman.api.timeparams import MAX_RELATIVE, parse_time_or_relative, relative_offset
from cronman.errors import ValidationError
from cronman.store.run_search import search_windows

NOW = datetime(2026, 11, 24, 10, 17, 5, tzinfo=UTC)


@pytest.mark.parametrize("raw, back", [
    ("now", timedelta(0)), ("-1h", timedelta(hours=1)), ("-90m", timedelta(minutes=90)),
    ("-1h30m", timedelta(minutes=90)), ("-2w3d", timedelta(days=17)),
    ("-1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)), ("-0s", timedelta(0)),
    ("-999999999w", MAX_RELATIVE),
])
def test_relative_times(raw, back):
    assert relative_offset(raw) == back
    assert parse_time_or_relative(raw, "since", now=NOW) == NOW - back


@pytest.mark.parametrize("raw", ["-", "1h", "-1y", "-30m1h", "+1h", "-1h ", "yesterday", "",
                                 "-1.5h", "2026-11-24"])
def test_bad_times_name_the_field(raw):
    if raw == "-1h ":  # surrounding blanks are forgiven
        assert parse_time_or_relative(raw, "until", now=NOW) == NOW - timedelta(hours=1)
        return
    with pytest.raises(ValidationError) as err:
        parse_time_or_relative(raw, "until", now=NOW)
    assert err.value.field == "until"


def test_rfc3339_still_works():
    assert parse_time_or_relative("2026-11-24T09:00:00+01:00", "since", now=NOW) == datetime(
        2026, 11, 24, 8, tzinfo=UTC)
    assert parse_time_or_relative(None, "since", now=NOW) is None


def test_step_choice():
    assert choose_step(3600, None) == 30
    assert choose_step(86400, None) == 900
    assert choose_step(600, 1) == 1
    assert choose_step(3600, 1) == 5  # 1,440 steps at most
    assert choose_step(30 * 86400, 60) >= 30 * 86400 / STATS_MAX_STEPS
    lo, hi = stats_window(NOW - timedelta(hours=1), NOW, 60)
    assert lo == datetime(2026, 11, 24, 9, 17, tzinfo=UTC)
    assert hi == datetime(2026, 11, 24, 10, 18, tzinfo=UTC)


def test_search_windows_cover_the_range_newest_first_in_doubling_days():
    since = NOW - timedelta(days=45)
    windows = search_windows(since, None, NOW)
    assert windows[0] == (datetime(2026, 11, 24, tzinfo=UTC), None)
    widths = [(hi - lo).days for lo, hi in windows[1:-1]]
    assert widths == [1, 2, 4, 8, 16]
    assert windows[-1][0] == since
    for (lo, _), (_, hi) in zip(windows, windows[1:], strict=False):
        assert hi == lo  # contiguous
    assert len(windows) <= 8
    assert search_windows(NOW - timedelta(hours=1), NOW, NOW) == [
        (NOW - timedelta(hours=1), NOW)]
    assert search_windows(NOW, NOW - timedelta(hours=1), NOW) == []
    midnight = datetime(2026, 11, 24, tzinfo=UTC)
    assert search_windows(midnight - timedelta(hours=1), midnight, NOW) == [
        (midnight - timedelta(hours=1), midnight)]


def test_search_windows_reach_the_end_of_the_calendar():
    """The doubled width once went below year 1 (OverflowError) from year 9999."""
    since = NOW - timedelta(days=46)
    windows = search_windows(since, datetime(9999, 12, 31, tzinfo=UTC), NOW)
    assert windows[-1][0] == since and windows[0][1] == datetime(9999, 12, 31, tzinfo=UTC)
    assert all(lo < hi for lo, hi in windows if hi is not None)
