"""The reference clock: offset from round trips, min-RTT sample, skew, and a
wall clock stepped under a running node."""

from __future__ import annotations

import random
import sys
import threading
import time

from cronman.scheduler.runtime.clock import JUMP_MS, MAX_SAMPLES, SAMPLE_WINDOW, ReferenceClock


class Times:
    """A host's wall and monotonic clocks: ``tick`` moves both, ``step`` the wall clock only."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def local(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def tick(self, s: float) -> None:
        self.wall += s
        self.mono += s

    def step(self, s: float) -> None:
        self.wall += s


def clock(max_skew: float = 1.0) -> tuple[ReferenceClock, Times]:
    t = Times()
    return ReferenceClock(max_skew=max_skew, local=t.local, monotonic=t.monotonic), t


def reading(c: ReferenceClock, t: Times, offset_ms: float, rtt_ms: float = 0.0,
            source: str = "redis") -> None:
    """A round trip of ``rtt_ms`` from now; at its midpoint the reference
    reads ``offset_ms`` more than this host's wall clock."""
    c.observe(source, (t.wall + rtt_ms / 2000) * 1000 + offset_ms, t.mono, t.mono + rtt_ms / 1000)


def test_the_offset_is_the_sample_with_the_shortest_round_trip():
    c, t = clock()
    # This host runs 2 s fast: the reference reads 2 s less than the midpoint.
    reading(c, t, -2000 + 30, rtt_ms=80)  # 80 ms: off by 30
    reading(c, t, -2000, rtt_ms=2)  # 2 ms round trip
    assert c.offset_ms == -2000
    assert abs(c.uncertainty_ms - 1.0) < 1e-6
    assert c.now_ms() == int(t.wall * 1000) - 2000
    assert c.skewed and c.source == "redis"


def test_small_offsets_are_corrected_and_not_skewed():
    c, t = clock(max_skew=1.0)
    reading(c, t, 300)
    assert c.offset_ms == 300 and not c.skewed
    reading(c, t, 1500)
    assert c.offset_ms == 300  # the earlier sample had the same round trip and came first
    t.tick(31)  # past the sample window: only the new reading counts
    reading(c, t, 1500)
    assert c.offset_ms == 1500 and c.skewed


def test_the_database_clock_is_the_reference_only_while_redis_is_silent():
    c, t = clock()
    reading(c, t, 10)
    reading(c, t, 500, source="database")
    assert (c.source, c.offset_ms) == ("redis", 10)
    t.tick(11)  # no Redis sample for longer than STALE_AFTER
    reading(c, t, 500, source="database")
    assert (c.source, c.offset_ms) == ("database", 500)


def test_the_reference_time_runs_on_the_monotonic_clock_between_samples():
    c, t = clock()
    assert c.now_ms() == int(t.wall * 1000)  # no sample yet: this host's wall clock
    reading(c, t, 250, rtt_ms=2)
    start = c.now_ms()
    assert start == int(t.wall * 1000) + 250
    t.step(-40.0)  # stepped back: the reference time does not follow it
    assert c.now_ms() == start
    t.tick(1.5)
    assert c.now_ms() == start + 1500


def test_a_wall_clock_stepped_ahead_and_back_is_judged_at_the_next_sample():
    c, t = clock(max_skew=1.0)
    # Many samples with a short round trip, before the step: under the old
    # window they would have kept the offset for as long as they stayed in it.
    for _ in range(50):
        reading(c, t, 5, rtt_ms=1)
        t.tick(0.1)
    assert (c.offset_ms, c.skewed) == (5, False)
    now = c.now_ms()
    t.step(6.0)
    reading(c, t, -6000 + 5, rtt_ms=30)  # a slower trip: it still tells
    assert (c.offset_ms, c.skewed) == (-5995, True)
    assert abs(c.now_ms() - now) <= 2  # the cluster's "now" went on as if nothing happened
    t.tick(0.1)
    t.step(-6.0)  # set right again
    reading(c, t, 5, rtt_ms=30)
    assert (c.offset_ms, c.skewed) == (5, False)
    t.step(-3.0)  # behind
    reading(c, t, 3000 + 5, rtt_ms=30)
    assert (c.offset_ms, c.skewed) == (3005, True)


def test_a_round_trip_across_a_step_is_measured_on_the_monotonic_clock():
    c, t = clock(max_skew=1.0)
    reading(c, t, t.wall * 1000, rtt_ms=20)
    # The wall clock goes back 8 s during a 10 ms round trip: on the wall
    # clock the trip took -7.99 s (a zero-length trip, the best sample of
    # the window for 30 s); on the monotonic clock, 10 ms.
    sent = t.mono
    t.tick(0.005)
    t.step(-8.0)
    t.tick(0.005)
    c.observe("redis", (t.wall + 8.0 - 0.005) * 1000, sent, t.mono)
    assert c.offset_ms == 8000 and c.skewed
    assert abs(c.uncertainty_ms - 5.0) < 1e-6


def test_samples_before_a_jump_of_the_monotonic_clock_are_dropped():
    # A host suspended for 20 s: its monotonic clock stood still, its wall
    # clock did not. The samples before that measured a monotonic clock that
    # has since lost 20 s against the reference.
    c, t = clock(max_skew=1.0)
    for _ in range(20):
        reading(c, t, 3, rtt_ms=1)
        t.tick(0.1)
    t.wall += 20.0
    reading(c, t, 3, rtt_ms=40)
    assert c.offset_ms == 3 and not c.skewed
    assert abs(c.now_ms() - (int(t.wall * 1000) + 3)) <= 1
    # A step under the bound keeps the samples (on the monotonic clock, they
    # are good): the slower one does not displace them, the offset moves.
    c2, t2 = clock()
    reading(c2, t2, 3, rtt_ms=1)
    t2.tick(0.1)
    t2.step(JUMP_MS / 2000)
    reading(c2, t2, 3 - JUMP_MS / 2, rtt_ms=40)
    assert abs(c2.uncertainty_ms - 0.5) < 1e-6
    assert c2.offset_ms == 3 - JUMP_MS // 2


def test_samples_from_two_threads_at_once() -> None:
    # The pulse thread brings Redis samples while the loop brings the database's.
    ref = ReferenceClock()
    errors: list[BaseException] = []

    def feed(source: str) -> None:
        try:
            for i in range(20_000):
                now = time.monotonic()
                wall = time.time()
                ref.observe(source, wall * 1000.0 + 5, now - 0.001 * (i % 7), now)
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
    assert abs(ref.offset_ms - 5) <= 2


def test_the_estimate_is_the_shortest_round_trip_of_the_window_however_samples_come():
    # Checked against a scan of every sample in the window (earliest of equals).
    # Times in binary fractions of a second: equal round trips come out equal.
    rng = random.Random(7)
    c, t = clock(max_skew=1e9)
    seen: list[tuple[float, float, float]] = []  # (monotonic at, rtt ms, offset ms)
    for i in range(3000):
        t.tick(rng.choice((1 / 128, 1 / 8, 0.5, 3.0)))
        rtt = rng.choice((1, 2, 2, 3, 5, 8, 40)) * 1000 / 1024
        offset = float(i % 97)
        reading(c, t, offset, rtt_ms=rtt)
        seen.append((t.mono, rtt, offset))
        window = [s for s in seen[-MAX_SAMPLES:] if s[0] >= t.mono - SAMPLE_WINDOW]
        best = min(window, key=lambda s: s[1])
        assert abs(c.uncertainty_ms - best[1] / 2) < 1e-6
        assert abs(c.offset_ms - round(best[2])) < 2  # within the hysteresis
