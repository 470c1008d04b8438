"""The in-process coordinator: membership with TTL by a fake clock, fire locks."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from cronman.coordination.base import NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.errors import CoordinatorUnavailable


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(clock) -> InProcessCoordinator:
    return InProcessCoordinator(ttl=30, clock=clock)


def node(node_id: str, **stats: int) -> NodeInfo:
    return NodeInfo(
        id=node_id,
        address=f"{node_id}:9000",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        stats=dict(stats),
    )


def test_join_heartbeat_members_sorted_with_info(coord, clock):
    coord.join(node("b", owned_jobs=3))
    coord.join(node("a"))
    members = coord.live_members()
    assert [m.id for m in members] == ["a", "b"]
    b = members[1]
    assert b.address == "b:9000"
    assert b.stats == {"owned_jobs": 3}
    assert b.started_at == datetime(2026, 1, 1, tzinfo=UTC)
    first_beat = b.last_heartbeat
    assert first_beat is not None and first_beat.tzinfo is not None
    clock.advance(5)
    coord.heartbeat(node("b", owned_jobs=4))
    b = coord.live_members()[1]
    assert b.stats == {"owned_jobs": 4}
    assert (b.last_heartbeat - first_beat).total_seconds() == pytest.approx(5)


def test_member_expires_after_ttl_unless_it_heartbeats(coord, clock):
    coord.join(node("a"))
    coord.join(node("b"))
    clock.advance(20)
    coord.heartbeat(node("a"))
    clock.advance(9.9)
    assert [m.id for m in coord.live_members()] == ["a", "b"]
    clock.advance(0.1)  # b's last heartbeat is now exactly ttl old: gone
    assert [m.id for m in coord.live_members()] == ["a"]
    clock.advance(30)
    assert coord.live_members() == []
    coord.heartbeat(node("b"))  # a node that comes back is live again
    assert [m.id for m in coord.live_members()] == ["b"]


def test_leave_is_immediate_and_idempotent(coord):
    coord.join(node("a"))
    coord.leave("a")
    coord.leave("a")
    coord.leave("never-joined")
    assert coord.live_members() == []


def test_handles_share_members_and_locks(coord):
    other = coord.handle()
    coord.join(node("a"))
    other.join(node("b"))
    assert [m.id for m in other.live_members()] == ["a", "b"]
    keys = [("job-1", 1000), ("job-2", 1000)]
    assert coord.claim_fires(keys, 5000) == [True, True]
    assert other.claim_fires(keys + [("job-3", 1000)], 5000) == [False, False, True]
    # The holder claiming again keeps its locks; the loser still loses.
    assert coord.claim_fires(keys, 5000) == [True, True]
    assert other.claim_fires(keys, 5000) == [False, False]


def test_locks_expire_by_the_clock(coord, clock):
    other = coord.handle()
    assert coord.claim_fires([("j", 1)], 2000) == [True]
    clock.advance(1.999)
    assert other.claim_fires([("j", 1)], 2000) == [False]
    clock.advance(0.001)
    assert other.claim_fires([("j", 1)], 2000) == [True]
    assert coord.claim_fires([("j", 1)], 2000) == [False]
    assert coord.claim_fires([], 2000) == []
    clock.advance(10)
    coord.claim_fires([("x", 2)], 1000)
    assert coord.stats()["locks_held"] == 1  # expired locks are purged


def test_distinct_fire_times_are_distinct_locks(coord):
    other = coord.handle()
    assert coord.claim_fires([("j", 1000)], 1000) == [True]
    assert other.claim_fires([("j", 2000)], 1000) == [True]


def test_exactly_one_winner_among_racing_threads(coord):
    handles = [coord.handle() for _ in range(4)]
    keys = [(f"job-{i}", 1700000000000) for i in range(500)]
    results: list[list[bool]] = [[] for _ in handles]
    barrier = threading.Barrier(len(handles))

    def run(i: int) -> None:
        barrier.wait()
        results[i] = handles[i].claim_fires(keys, 10_000)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(handles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(len(keys)):
        assert sum(r[k] for r in results) == 1


def test_outcome_marks_keep_the_latest_attempt_and_expire_by_the_clock(coord, clock):
    other = coord.handle()
    coord.mark_outcomes([("run-1", 2, "succeeded-2"), ("run-2", 1, "retrying-1")], 5000)
    # A stalled node's late mark of an earlier attempt does not replace a
    # later one; a mark of the same attempt (or a later one) does.
    other.mark_outcomes([("run-1", 1, "failed-1"), ("run-2", 1, "failed-1")], 5000)
    assert other.read_outcomes(["run-1", "run-2", "run-3"]) == [
        "succeeded-2", "failed-1", None]
    coord.mark_outcomes([("run-3", 1, "short")], 1000)
    clock.advance(0.999)
    assert coord.read_outcomes(["run-3"]) == ["short"]
    clock.advance(0.001)
    assert coord.read_outcomes(["run-3", "run-1"]) == [None, "succeeded-2"]
    clock.advance(4)
    assert coord.read_outcomes(["run-1", "run-2"]) == [None, None]
    assert coord.read_outcomes([]) == []
    assert coord.stats()["outcome_marks"] == 3 and coord.stats()["outcome_batches"] == 2
    other.set_available(False)
    with pytest.raises(CoordinatorUnavailable):
        other.mark_outcomes([("run-4", 1, "m")], 1000)
    with pytest.raises(CoordinatorUnavailable):
        other.read_outcomes(["run-4"])


def test_unavailable_and_closed_handles_raise(coord):
    other = coord.handle()
    other.set_available(False)
    assert not other.ping()
    for call in (
        lambda: other.heartbeat(node("x")),
        other.live_members,
        lambda: other.claim_fires([("j", 1)], 1000),
        lambda: other.leave("x"),
    ):
        with pytest.raises(CoordinatorUnavailable):
            call()
    assert other.stats()["unavailable"] == 4
    assert other.stats()["heartbeat_failures"] == 1
    coord.join(node("a"))  # the other handle is unaffected
    other.set_available(True)
    assert [m.id for m in other.live_members()] == ["a"]
    other.close()
    with pytest.raises(CoordinatorUnavailable):
        other.live_members()
    assert coord.ping()
    assert [m.id for m in coord.live_members()] == ["a"]


def test_counters(coord):
    coord.join(node("a"))
    coord.heartbeat(node("a"))
    coord.claim_fires([("j", 1), ("j", 2)], 1000)
    stats = coord.stats()
    assert stats["heartbeats"] == 2
    assert stats["claim_batches"] == 1
    assert stats["claim_keys"] == 2
    assert stats["shards_up"] == 1


def test_bad_arguments(clock):
    with pytest.raises(ValueError):
        InProcessCoordinator(ttl=0, clock=clock)
    with pytest.raises(ValueError):
        InProcessCoordinator(ttl=1, clock=clock).claim_fires([("j", 1)], 0)


def test_default_clock_is_real_time():
    coord = InProcessCoordinator(ttl=0.5)  # no loaded machine stalls two calls that long
    coord.join(node("a"))
    assert [m.id for m in coord.live_members()] == ["a"]
    threading.Event().wait(0.6)
    assert coord.live_members() == []


def test_standalone_pulses_read_the_host_clock_as_it_is_now(monkeypatch):
    """In standalone the in-process coordinator's TIME is the reference: a
    host clock stepped while the node runs steps it too (no skew for a node
    alone), and a node's clock fed by it stays within bounds."""
    from datetime import timedelta

    from cronman.coordination import memory
    from cronman.scheduler.runtime.clock import IN_PROCESS, ReferenceClock
    from cronman.timeutil import to_ms, utcnow

    coord = InProcessCoordinator(ttl=30)
    wall = {"step": timedelta(0)}
    monkeypatch.setattr(memory, "utcnow", lambda: utcnow() + wall["step"])
    clock = ReferenceClock(local=lambda: (utcnow() + wall["step"]).timestamp())
    for step in (timedelta(0), timedelta(seconds=25), timedelta(seconds=-40)):
        wall["step"] = step
        for _ in range(2):
            reading = coord.pulse("n1", "", 1000, [])
            assert abs(reading.server_ms - to_ms(utcnow() + step)) < 100
            clock.observe(IN_PROCESS, reading.server_ms, reading.sent, reading.received)
        assert not clock.skewed and abs(clock.offset_ms) < 100
