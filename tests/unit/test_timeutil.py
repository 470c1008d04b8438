"""Millisecond conversions: exact over the whole range of datetimes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from cronman.timeutil import EPOCH, from_ms, to_ms

MIN_MS = to_ms(datetime(1, 1, 1, tzinfo=UTC))
MAX_MS = to_ms(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))
FAST_LIMIT_MS = 2**32 * 1000  # from_ms's float path ends here


@given(st.one_of(st.integers(MIN_MS, MAX_MS),
                 st.integers(0, FAST_LIMIT_MS + 10**9),
                 st.integers(FAST_LIMIT_MS - 10**6, FAST_LIMIT_MS + 10**6)))
def test_from_ms_is_exact_and_to_ms_undoes_it(ms: int) -> None:
    t = from_ms(ms)
    assert t == EPOCH + timedelta(milliseconds=ms)
    assert t.tzinfo is UTC
    assert to_ms(t) == ms


def test_from_ms_at_the_edges() -> None:
    for ms in (0, 1, -1, 999, FAST_LIMIT_MS - 1, FAST_LIMIT_MS, MIN_MS, MAX_MS):
        assert from_ms(ms) == EPOCH + timedelta(milliseconds=ms)
