"""Pulser: how a node judges its peers from their pulses -- a slow or briefly
failing coordinator is not taken for peers that are gone."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from cronman.coordination.base import Pulse, PulseReading
from cronman.coordination.memory import InProcessCoordinator
from cronman.errors import CoordinatorUnavailable
from cronman.scheduler.claim import pulse as pulse_module
from cronman.scheduler.claim.pulse import (
    RTT_WINDOW_S,
    STALE_MS,
    UNKNOWN_AFTER_S,
    Progress,
    Pulser,
)
from cronman.scheduler.runtime.clock import IN_PROCESS, REDIS, ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics

SERVER_MS = 1_800_000_000_000


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class ScriptedCoordinator:
    """Answers pulse round trips as told: a reading in which peer "b" last
    pulsed ``age_ms`` before the server's time, taking ``rtt_ms``; or a failure."""

    shared = True  # as Redis: its clock is the cluster's reference

    def __init__(self, fake_time: FakeTime) -> None:
        self._time = fake_time
        self.fail = False
        self.age_ms = 0
        self.rtt_ms = 1

    def pulse(self, node_id, payload, ttl_ms, peers):
        if self.fail:
            raise CoordinatorUnavailable("timed out")
        sent = self._time.now
        self._time.now += self.rtt_ms / 1000.0  # the round trip takes its time
        progress = Progress("v", True, SERVER_MS, False).encode()
        return PulseReading(SERVER_MS, sent, self._time.now,
                            {"b": Pulse("b", SERVER_MS - self.age_ms, progress)})


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    t = FakeTime()
    monkeypatch.setattr(pulse_module, "time", t)
    return t


class _Node:
    """What a pulser asks of its node and of the membership."""

    def __init__(self, members: list[str]) -> None:
        self.members = members

    def progress(self) -> Progress:
        return Progress("v", True, 0, False)


@pytest.fixture
def setup(fake_time):
    coordinator = ScriptedCoordinator(fake_time)
    pulser = Pulser("a", coordinator, clock=ReferenceClock(),  # type: ignore[arg-type]
                    progress=_Node([]), peers=_Node(["a", "b"]),
                    metrics=NodeMetrics(CollectorRegistry()))
    return pulser, coordinator


def test_one_failed_round_trip_keeps_the_peers_known_until_failures_last(setup, fake_time):
    pulser, coordinator = setup
    pulser.pulse_once()
    assert pulser.known and pulser.alive_nodes() == ["b"]
    coordinator.fail = True
    fake_time.now += 0.3
    pulser.pulse_once()  # a timeout under load: the last reading stands
    assert pulser.known and pulser.alive_nodes() == ["b"]
    fake_time.now += UNKNOWN_AFTER_S
    pulser.pulse_once()  # failing for longer: the coordinator is down
    assert not pulser.known and pulser.alive_nodes() == []
    coordinator.fail = False
    pulser.pulse_once()
    assert pulser.known and pulser.alive_nodes() == ["b"]


def test_a_peer_is_stale_past_the_bound_plus_the_slowest_recent_round_trip(setup, fake_time):
    pulser, coordinator = setup
    coordinator.age_ms = STALE_MS + 200
    pulser.pulse_once()
    assert pulser.progress_of("b") is None  # a fast coordinator: b is gone
    # The coordinator answers slowly (its host is overloaded): b's pulses
    # land late for the same reason, so b is not judged gone.
    coordinator.rtt_ms = 400
    pulser.pulse_once()
    assert pulser.progress_of("b") is not None
    coordinator.rtt_ms = 1
    fake_time.now += RTT_WINDOW_S / 2
    pulser.pulse_once()
    assert pulser.progress_of("b") is not None  # the slow trip is still recent
    fake_time.now += RTT_WINDOW_S
    pulser.pulse_once()
    assert pulser.progress_of("b") is None


def test_the_clock_reference_is_named_for_the_coordinator_that_answers(setup, caplog):
    pulser, _ = setup
    pulser.pulse_once()
    assert pulser._clock.source == REDIS
    # Standalone: no Redis; the in-process coordinator's clock is this host's.
    clock = ReferenceClock()
    alone = Pulser("a", InProcessCoordinator(ttl=30.0), clock=clock,
                   progress=_Node([]), peers=_Node(["a"]),
                   metrics=NodeMetrics(CollectorRegistry()))
    with caplog.at_level("INFO", logger="cronman.scheduler.runtime.clock"):
        alone.pulse_once()
    assert clock.source == IN_PROCESS
    assert "clock reference: this host's clock (in-process coordinator, no Redis)" in caplog.text
    assert "redis" not in caplog.text.replace("no Redis", "")
