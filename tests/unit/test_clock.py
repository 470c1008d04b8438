"""The reference clock: offset from round trips, min-RTT sample, skew."""

from __future__ import annotations

import random
import sys
import threading
import time

from cronman.scheduler.runtime.clock import MAX_SAMPLES, SAMPLE_WINDOW, ReferenceClock


class Times:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def local(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


def clock(max_skew: float = 1.0) -> tuple[ReferenceClock, Times]:
    t = Times()
    return ReferenceClock(max_skew=max_skew, local=t.local, monotonic=t.monotonic), t


def test_the_offset_is_the_sample_with_the_shortest_round_trip():
    c, t = clock()
    # This host runs 2 s fast: the reference reads 2 s less than the midpoint.
    c.observe("redis", (t.wall - 2.0) * 1000 + 70, t.wall, t.wall + 0.080)  # 80 ms: off by 30
    c.observe("redis", (t.wall - 2.0) * 1000 + 1, t.wall, t.wall + 0.002)  # 2 ms round trip
    assert c.offset_ms == -2000
    assert abs(c.uncertainty_ms - 1.0) < 1e-6
    assert c.now_ms() == int(t.wall * 1000) - 2000
    assert c.skewed and c.source == "redis"


def test_small_offsets_are_corrected_and_not_skewed():
    c, t = clock(max_skew=1.0)
    c.observe("redis", t.wall * 1000 + 300, t.wall, t.wall)
    assert c.offset_ms == 300 and not c.skewed
    c.observe("redis", t.wall * 1000 + 1500, t.wall, t.wall)
    assert c.offset_ms == 300  # the earlier sample had the same round trip and came first
    t.mono += 31  # past the sample window: only the new reading counts
    c.observe("redis", t.wall * 1000 + 1500, t.wall, t.wall)
    assert c.offset_ms == 1500 and c.skewed


def test_the_database_clock_is_the_reference_only_while_redis_is_silent():
    c, t = clock()
    c.observe("redis", t.wall * 1000 + 10, t.wall, t.wall)
    c.observe("database", t.wall * 1000 + 500, t.wall, t.wall)
    assert (c.source, c.offset_ms) == ("redis", 10)
    t.mono += 11  # no Redis sample for longer than STALE_AFTER
    c.observe("database", t.wall * 1000 + 500, t.wall, t.wall)
    assert (c.source, c.offset_ms) == ("database", 500)


def test_samples_from_two_threads_at_once() -> None:
    # The pulse thread brings Redis samples while the loop brings the database's.
    ref = ReferenceClock()
    errors: list[BaseException] = []

    def feed(source: str) -> None:
        try:
            for i in range(20_000):
                now = time.time()
                ref.observe(source, now * 1000.0 + 5, now - 0.001 * (i % 7), now)
        except BaseException as exc:  # noqa: BLE001 - the failure under test
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=feed, args=(s,)) for s in ("redis", "database")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert ref.source == "redis"
    assert abs(ref.offset_ms - 5) <= 1


def test_the_estimate_is_the_shortest_round_trip_of_the_window_however_samples_come():
    # Checked against a scan of every sample in the window (earliest of equals).
    rng = random.Random(7)
    c, t = clock(max_skew=1e9)
    seen: list[tuple[float, float, float]] = []  # (monotonic at, rtt ms, offset ms)
    for i in range(3000):
        t.mono += rng.choice((0.01, 0.1, 0.5, 3.0))
        rtt = rng.choice((1, 2, 2, 3, 5, 8, 40))
        offset = float(i % 97)
        c.observe("redis", (t.wall + rtt / 2000) * 1000 + offset, t.wall, t.wall + rtt / 1000)
        seen.append((t.mono, rtt, offset))
        window = [s for s in seen[-MAX_SAMPLES:] if s[0] >= t.mono - SAMPLE_WINDOW]
        best = min(window, key=lambda s: s[1])
        assert abs(c.uncertainty_ms - best[1] / 2) < 1e-6
        assert abs(c.offset_ms - round(best[2])) < 2  # within the hysteresis
