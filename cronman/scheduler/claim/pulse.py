"""Pulses: each node says, several times a second, that its loop turns and how
far its dispatch has come; and learns the same of its peers.

A job's first owner (its *primary*) claims and fires it; the second owner
only watches. What it watches is the primary's pulse: a primary is *healthy*
while its pulse is fresh, it sees the same membership, it is ready (loaded,
clock within bounds) and its dispatch progresses. While it is, the second
owner spends nothing on the job's fires but a note of them (``takeover``);
once it is not -- killed, stalled, cut off, skewed -- the second owner takes
the fires over within a pulse or two. A node that is merely busy (its
backlog grows but keeps moving) is never taken over for being late, nor is
one whose pulses are only slowed by the coordinator itself: staleness allows
for this node's own recent round trips, and one failed round trip keeps the
last reading.

A pulse carries the node's *through* time: every fire it holds that was due
at or before it has been started (or ended otherwise). Fires a second owner
noted that are not later than its primary's through time need no watching
any more.

Each pulse round trip is also a sample of the cluster's reference clock
(``clock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from cronman.coordination.base import Coordinator, Pulse
from cronman.errors import CoordinatorUnavailable
from cronman.scheduler.runtime.clock import IN_PROCESS, REDIS, ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog

log = logging.getLogger(__name__)

PULSE_INTERVAL = 0.1  # seconds between pulses
PULSE_TTL_MS = 3000  # a pulse not renewed is gone after this
# A pulse older than this means the node's loop has stopped turning: it died,
# or is stuck (an event loop blocked that long fires nothing on time either).
STALE_MS = 700
# A coordinator slow to answer (starved of CPU by an overload on its host)
# delays every node's pulses alike: a peer's pulse counts as stale only past
# STALE_MS plus the slowest of this node's own round trips of the last
# RTT_WINDOW_S seconds (at most MAX_SLACK_MS more).
RTT_WINDOW_S = 3.0
MAX_SLACK_MS = 2000
# One failed pulse round trip (a timeout under load) does not make the peers
# unknown: their last reading stands for this long (a coordinator that is
# down fails every round trip).
UNKNOWN_AFTER_S = 1.0
# A node whose through time lags its clock by more than this, and that has
# started no attempt for as long (plus STALL_MS_PER_HELD for each run it
# holds), is stalled: alive, but its dispatch does not progress.
STALL_MS = 1000
# A node holding many runs is busy: each gives it this much longer before it
# counts as stalled, so that a backlog (every step slower, the loop starved
# of CPU) is not taken for a stall -- 1,000 held runs give it 1 s more.
STALL_MS_PER_HELD = 1.0


@dataclass(frozen=True, slots=True)
class Progress:
    """What a node says of itself in its pulse."""

    view: str  # view_key of the membership its job table is reconciled to
    ready: bool  # loaded, reconciled, clock within bounds: it claims its fires
    through_ms: int  # every held fire due by then has been started
    stalled: bool  # its dispatch has not moved for a while though fires are due

    def encode(self) -> str:
        return f"{self.view}|{int(self.ready)}|{self.through_ms}|{int(self.stalled)}"

    @classmethod
    def decode(cls, text: str) -> Progress | None:
        try:
            view, ready, through, stalled = text.split("|")
            return cls(view, ready == "1", int(through), stalled == "1")
        except ValueError:
            return None


class ProgressReport(Protocol):
    """What the pulser asks the node before each pulse (on the pulse thread)."""

    def progress(self) -> Progress:
        """What this node's pulse says of it now."""


class PulseReadings(Protocol):
    """Told after each pulse round trip (on the event loop)."""

    def pulse_read(self) -> None:
        """The peers' pulses and the reference clock were read again (or not)."""


class Peers(Protocol):
    """The membership a pulse reads the peers of (``jobs.membership.Membership``)."""

    @property
    def members(self) -> list[str]:
        """The live members as this node last saw them (its own id included)."""


class StallWatch:
    """Tells when a node's own dispatch stops moving while fires wait: its
    through time lags and it has started no attempt for a while -- a while
    that grows with the runs it holds.

    A busy node is not stalled, however late: it keeps starting attempts
    (its through time may stand still behind a low-priority fire while
    higher ones go first), or every attempt slot is taken and it waits on its
    targets (a peer taking its fires over would wait on the same targets,
    and pay for the move besides), or it holds a backlog that slows each
    step, which its deadline allows for."""

    def __init__(self) -> None:
        self._starts = -1
        self._since = 0

    def stalled(self, through_ms: int, now_ms: int, *, starts: int, saturated: bool,
                held: int) -> bool:
        """``starts``: attempts started so far; ``saturated``: every attempt
        slot is taken; ``held``: runs the node holds (claimed, not ended, or
        being claimed).

        The time without a start counts from the last start, or from when
        the oldest waiting fire fell due (just after ``through_ms``) if that
        is later: a node idle before a herd has started nothing for minutes,
        and would otherwise count as stalled a second after the herd's
        instant, while its first claim batch is still being written."""
        if starts != self._starts or saturated:
            self._starts, self._since = starts, now_ms
        deadline = STALL_MS + held * STALL_MS_PER_HELD
        waiting_since = max(self._since, through_ms + 1)
        return now_ms - through_ms > STALL_MS and now_ms - waiting_since > deadline


class Pulser:
    """Sends this node's pulses and keeps its peers' latest ones.

    Pulses go out from a thread of their own, not from the event loop: a node
    whose loop is starved of CPU (overloaded, not stuck) keeps pulsing, and
    its progress -- attempts started -- tells that it is busy, not gone. A
    loop that stops turning stops starting attempts: the node then says it
    is stalled (``StallWatch``)."""

    def __init__(self, node_id: str, coordinator: Coordinator, *, clock: ReferenceClock,
                 progress: ProgressReport, peers: Peers, metrics: NodeMetrics,
                 readings: PulseReadings | None = None) -> None:
        self.node_id = node_id
        self._coordinator = coordinator
        self._clock = clock
        # Whose clock a pulse reads: Redis's, or this host's (in-process coordinator).
        self._clock_source = REDIS if coordinator.shared else IN_PROCESS
        self._progress = progress
        self._peers = peers
        self._metrics = metrics
        self._readings = readings
        # The last reading, published whole (the pulse thread writes it, the
        # event loop reads it); None: unknown (coordinator down).
        self._reading: _Reading | None = None
        self._read_at = 0.0  # monotonic time of the last reading
        self._rtts: deque[tuple[float, int]] = deque()  # (monotonic time, round trip ms)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ratelog = RateLimitedLog(log)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Pulse every ``PULSE_INTERVAL`` on a thread, telling ``loop`` of each reading."""
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="cronman-pulse", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.pulse_once()
            next_at = max(next_at + PULSE_INTERVAL, time.monotonic())
            if self._stop.wait(max(0.0, next_at - time.monotonic())):
                return

    def pulse_once(self) -> None:
        """One pulse round trip (blocking: call it off the event loop)."""
        peers = [p for p in self._peers.members if p != self.node_id]
        started = time.monotonic()
        try:
            reading = self._coordinator.pulse(self.node_id, self._progress.progress().encode(),
                                              PULSE_TTL_MS, peers)
        except CoordinatorUnavailable as exc:
            self._metrics.coordinator_errors.labels("pulse").inc()
            if time.monotonic() - self._read_at > UNKNOWN_AFTER_S:
                self._ratelog.error("pulse", "coordinator unreachable: peers' pulses unknown, "
                                    "every owner claims its fires (%s)", exc)
                self._reading = None
        else:
            now = time.monotonic()
            self._ratelog.clear("pulse")
            self._clock.observe(self._clock_source, reading.server_ms, reading.sent, reading.received)
            self._metrics.clock_offset.set(self._clock.skew_seconds)
            slack = self._slack_ms(now, now - started)
            self._reading = _Reading(reading.server_ms, slack, reading.pulses)
            self._read_at = now
        loop = self._loop
        if loop is not None and self._readings is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._readings.pulse_read)

    def _slack_ms(self, now: float, round_trip: float) -> int:
        """The slowest round trip (ms, monotonic) of the last ``RTT_WINDOW_S``."""
        rtts = self._rtts
        rtts.append((now, min(MAX_SLACK_MS, int(round_trip * 1000))))
        while rtts[0][0] < now - RTT_WINDOW_S:
            rtts.popleft()
        return max(r for _, r in rtts)

    @property
    def known(self) -> bool:
        """Whether the peers' pulses could be read lately."""
        return self._reading is not None

    def progress_of(self, node_id: str) -> Progress | None:
        """What ``node_id``'s latest pulse says, if it is fresh."""
        return _progress(self._reading, node_id)

    def in_charge(self, node_id: str, view: str) -> bool:
        """Whether ``node_id`` claims and fires its jobs now, as this node
        would assign them (same ``view``): alive, ready, progressing."""
        p = self.progress_of(node_id)
        return p is not None and p.ready and not p.stalled and p.view == view

    def alive_nodes(self) -> list[str]:
        """The peers whose loop turns and whose dispatch progresses: a fire
        they hold is theirs to start, however late."""
        r = self._reading
        if r is None:
            return []
        return [n for n in r.pulses if (p := _progress(r, n)) is not None and not p.stalled]


@dataclass(frozen=True, slots=True)
class _Reading:
    server_ms: int  # the coordinator's time when it was read
    slack_ms: int  # allowed past STALE_MS (this node's slowest recent round trip)
    pulses: dict[str, Pulse]


def _progress(r: _Reading | None, node_id: str) -> Progress | None:
    if r is None:
        return None
    pulse = r.pulses.get(node_id)
    if pulse is None or r.server_ms - pulse.at_ms > STALE_MS + r.slack_ms:
        return None
    return Progress.decode(pulse.payload)
