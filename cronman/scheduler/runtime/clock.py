"""The cluster's "now": this host's clock, corrected to a shared reference.

Every node decides when a fire is due. A node whose clock runs fast would
reach every due time first and fire its jobs early, so nodes do not trust
their own clocks: each keeps an estimate of its offset to a reference clock
-- the Redis server's ``TIME`` (read with every pulse), or PostgreSQL's
``now()`` while Redis is unreachable -- from the round trips it makes anyway,
and schedules in reference time.

An offset sample is ``reference - (sent + received) / 2``, good to within half
the round trip; the estimate is the sample with the shortest round trip among
the recent ones (as NTP does). A node whose offset exceeds ``max_skew`` is
*skewed*: its clock is not to be trusted even corrected (a paused VM, a
broken NTP daemon), so it stops claiming and reports not ready until the
offset is back within bounds (see the node's readiness).

The samples are taken on this host's monotonic clock, not its wall clock,
and the cluster's "now" is the monotonic clock plus the estimate: a wall
clock stepped while the node runs (NTP stepping it, an operator setting it)
moves nothing the node schedules by. It shows at the next sample as an
offset of the wall clock to the reference, which is what the skew check
judges. Samples older than a jump of the monotonic clock against the wall
clock (a host suspended: its monotonic clock stood still) are dropped: they
tell the reference's distance to a monotonic clock that has since lost
time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cronman.errors import StoreUnavailable
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.timeutil import from_ms

log = logging.getLogger(__name__)

DATABASE_PROBE_INTERVAL = 5.0  # seconds between samples of the database's clock
DEFAULT_MAX_SKEW = 1.0  # seconds of offset past which a node takes itself out
SAMPLE_WINDOW = 30.0  # seconds of samples the estimate is taken from
MAX_SAMPLES = 512  # of one source, at most (the most recent)
STALE_AFTER = 10.0  # seconds without a sample of a source before it is no longer used
# How much a new estimate must differ from the applied one to replace it: the
# offset does not wander by fractions of a millisecond with each round trip.
HYSTERESIS_MS = 2
# A change this large of the wall clock's distance to the monotonic clock
# between two samples is a jump of one of them (the two only part at a step:
# NTP slews them alike). Well above the jitter of reading the two one after
# the other.
JUMP_MS = 50

# Sources of reference readings, the preferred first: the coordinator's clock
# (the Redis server's TIME; in standalone, the in-process coordinator's, which
# is this host's own), then the database server's.
REDIS = "redis"
IN_PROCESS = "in-process"
DATABASE = "database"
SOURCES = (REDIS, IN_PROCESS, DATABASE)
SOURCE_NAMES = {
    REDIS: "the Redis server's clock",
    IN_PROCESS: "this host's clock (in-process coordinator, no Redis)",
    DATABASE: "the database server's clock",
}


class DatabaseClockProbe:
    """Samples the database server's clock every few seconds: the reference
    while Redis cannot be read (``ReferenceClock`` prefers Redis samples)."""

    def __init__(self, clock: ReferenceClock, read: Callable[[], int | None],
                 pool: Pool, lifecycle: Lifecycle, interval: float = DATABASE_PROBE_INTERVAL
                 ) -> None:
        self._clock = clock
        self._read = read
        self._pool = pool
        self._lifecycle = lifecycle
        self._interval = interval

    async def run(self) -> None:
        while True:
            try:
                sent, ms, received = await self._pool(self._sample)
            except StoreUnavailable:
                ms = None
            if ms is None and not self._clock.has_source(DATABASE):
                return  # no clock of its own (SQLite): nothing to sample
            if ms is not None:
                self._clock.observe(DATABASE, ms, sent, received)
            if await self._lifecycle.sleep(self._interval):
                return

    def _sample(self) -> tuple[float, int | None, float]:
        sent = time.monotonic()
        ms = self._read()
        return sent, ms, time.monotonic()


@dataclass(frozen=True, slots=True)
class Sample:
    offset_ms: float  # the reference minus the monotonic clock (ms)
    rtt_ms: float
    at: float  # monotonic seconds


class _Window:
    """One source's samples of the last ``SAMPLE_WINDOW`` (at most
    ``MAX_SAMPLES``), kept as a sliding minimum: only the samples that may
    yet become the shortest round trip, in arrival order, so the best is the
    first and a pulse costs O(1), not a scan of the window."""

    __slots__ = ("_kept", "_seq", "latest_at")

    def __init__(self) -> None:
        self._kept: deque[tuple[int, Sample]] = deque()  # round trips non-decreasing
        self._seq = 0
        self.latest_at = float("-inf")

    def add(self, sample: Sample) -> None:
        self._seq += 1
        kept = self._kept
        while kept and kept[-1][1].rtt_ms > sample.rtt_ms:  # an equal earlier one stays first
            kept.pop()
        kept.append((self._seq, sample))
        self.latest_at = sample.at
        oldest_seq = self._seq - MAX_SAMPLES
        while kept[0][0] <= oldest_seq or kept[0][1].at < sample.at - SAMPLE_WINDOW:
            kept.popleft()

    def best(self) -> Sample:
        """The sample with the shortest round trip (the earliest of equals)."""
        return self._kept[0][1]

    def __bool__(self) -> bool:
        return bool(self._kept)


class ReferenceClock:
    """This host's clock corrected by its estimated offset to the reference:
    the monotonic clock plus the reference's distance to it (this host's wall
    clock until the first sample)."""

    def __init__(self, *, max_skew: float = DEFAULT_MAX_SKEW,
                 local: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_skew_ms = max_skew * 1000.0
        self._local = local
        self._monotonic = monotonic
        self._samples: dict[str, _Window] = {}
        # The reference minus the monotonic clock (ms); None: no sample yet.
        self._base_ms: int | None = None
        self.offset_ms = 0  # the reference minus this host's wall clock
        self.uncertainty_ms = 0.0
        self.source: str | None = None  # the source of the applied estimate
        self.skewed = False
        # The wall clock minus the monotonic one at the last sample (ms).
        self._apart_ms: int | None = None
        # Samples come from the pulse thread (Redis) and the loop (the database).
        self._learning = threading.Lock()

    # -- reading ----------------------------------------------------------

    def now_ms(self) -> int:
        """Reference time now, in Unix milliseconds."""
        base = self._base_ms
        if base is None:
            return int(self._local() * 1000.0) + self.offset_ms
        return int(self._monotonic() * 1000.0) + base

    def now(self) -> datetime:
        """Reference time now (aware UTC, millisecond precision)."""
        return from_ms(self.now_ms())

    def local_ms(self, reference_ms: int) -> int:
        """The local clock reading at which the reference shows ``reference_ms``."""
        return reference_ms - self.offset_ms

    @property
    def offset_seconds(self) -> float:
        """Reference minus this host's clock."""
        return self.offset_ms / 1000.0

    @property
    def skew_seconds(self) -> float:
        """This host's clock minus the reference (positive: it runs fast)."""
        return -self.offset_ms / 1000.0

    # -- learning ---------------------------------------------------------

    def has_source(self, source: str) -> bool:
        return bool(self._samples.get(source))

    def observe(self, source: str, reference_ms: float, sent: float, received: float) -> None:
        """A reading of the reference (``reference_ms``) taken between the
        monotonic times ``sent`` and ``received`` (seconds, this clock's
        ``monotonic``), from ``source`` (one of ``SOURCES``, the earlier
        preferred)."""
        rtt_ms = max(0.0, (received - sent) * 1000.0)
        offset = reference_ms - (sent + received) * 500.0
        with self._learning:
            now, apart, error = self._apart()
            last, self._apart_ms = self._apart_ms, apart
            if last is not None and abs(apart - last) > JUMP_MS + error:
                self._jumped(apart - last)
            window = self._samples.get(source)
            if window is None:
                window = self._samples[source] = _Window()
            window.add(Sample(offset, rtt_ms, now))
            self._estimate(now, apart)

    def _apart(self) -> tuple[float, int, float]:
        """(monotonic now, the wall clock minus the monotonic clock in ms, how
        far off that may be in ms): the two read one right after the other,
        the closest of three tries if something came between."""
        before, wall, after = self._monotonic(), self._local(), self._monotonic()
        for _ in range(2):
            if after - before < 0.001:
                break
            b, w, a = self._monotonic(), self._local(), self._monotonic()
            if a - b < after - before:
                before, wall, after = b, w, a
        return after, round((wall - (before + after) / 2) * 1000.0), (after - before) * 500.0

    def _jumped(self, by_ms: int) -> None:
        """The wall and monotonic clocks parted by ``by_ms``: one of them
        jumped. A wall clock stepped leaves the samples good (they are on the
        monotonic clock); a monotonic clock that stood still (a suspended
        host) does not, and which of the two moved only the reference can
        tell: every earlier sample is dropped, the estimate kept until a new
        one comes."""
        log.warning("this host's wall clock moved %+d ms against its monotonic clock (a clock "
                    "stepped, or the host was suspended): the clock's earlier samples are "
                    "dropped", by_ms)
        self._samples.clear()

    def _estimate(self, now: float, apart: int) -> None:
        for source in SOURCES:
            window = self._samples.get(source)
            if window and window.latest_at >= now - STALE_AFTER:
                best = window.best()
                break
        else:
            return  # nothing recent: keep the last estimate
        base = round(best.offset_ms)
        offset = base - apart
        if (source != self.source or self._base_ms is None
                or abs(base - self._base_ms) >= HYSTERESIS_MS):
            if source != self.source:
                log.info("clock reference: %s (offset %+d ms, +/- %.1f ms)",
                         SOURCE_NAMES.get(source, source), offset, best.rtt_ms / 2)
            self._base_ms = base
        self.source = source
        self.uncertainty_ms = best.rtt_ms / 2
        # The wall clock's offset, measured afresh at every sample: a step of
        # it shows at once, whatever the window holds.
        offset = self._base_ms - apart
        if abs(offset - self.offset_ms) >= HYSTERESIS_MS:
            self.offset_ms = offset
        skewed = abs(self.offset_ms) > self.max_skew_ms
        if skewed != self.skewed:
            self.skewed = skewed
            if skewed:
                log.error("this host's clock is %+.3f s off the cluster's reference (%s), more "
                          "than the %.3f s allowed: the node stops claiming fires and reports "
                          "not ready until its clock is corrected", self.skew_seconds,
                          SOURCE_NAMES.get(source, source), self.max_skew_ms / 1000.0)
            else:
                log.warning("this host's clock is back within %.3f s of the reference "
                            "(off by %+.3f s): the node claims fires again",
                            self.max_skew_ms / 1000.0, self.skew_seconds)
