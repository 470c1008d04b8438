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
        sent = time.time()
        ms = self._read()
        return sent, ms, time.time()


@dataclass(frozen=True, slots=True)
class Sample:
    offset_ms: float
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
    """This host's wall clock corrected by its estimated offset to the reference."""

    def __init__(self, *, max_skew: float = DEFAULT_MAX_SKEW,
                 local: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_skew_ms = max_skew * 1000.0
        self._local = local
        self._monotonic = monotonic
        self._samples: dict[str, _Window] = {}
        self.offset_ms = 0
        self.uncertainty_ms = 0.0
        self.source: str | None = None  # the source of the applied estimate
        self.skewed = False
        # Samples come from the pulse thread (Redis) and the loop (the database).
        self._learning = threading.Lock()

    # -- reading ----------------------------------------------------------

    def now_ms(self) -> int:
        """Reference time now, in Unix milliseconds."""
        return int(self._local() * 1000.0) + self.offset_ms

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
        """A reading of the reference (``reference_ms``) taken between the local
        wall-clock times ``sent`` and ``received`` (seconds), from ``source``
        (one of ``SOURCES``, the earlier preferred)."""
        rtt_ms = max(0.0, (received - sent) * 1000.0)
        offset = reference_ms - (sent + received) * 500.0
        now = self._monotonic()
        with self._learning:
            window = self._samples.get(source)
            if window is None:
                window = self._samples[source] = _Window()
            window.add(Sample(offset, rtt_ms, now))
            self._estimate(now)

    def _estimate(self, now: float) -> None:
        for source in SOURCES:
            window = self._samples.get(source)
            if window and window.latest_at >= now - STALE_AFTER:
                best = window.best()
                break
        else:
            return  # nothing recent: keep the last estimate
        offset = round(best.offset_ms)
        if source != self.source or abs(offset - self.offset_ms) >= HYSTERESIS_MS:
            if source != self.source:
                log.info("clock reference: %s (offset %+d ms, +/- %.1f ms)",
                         SOURCE_NAMES.get(source, source), offset, best.rtt_ms / 2)
            self.offset_ms = offset
        self.source = source
        self.uncertainty_ms = best.rtt_ms / 2
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
