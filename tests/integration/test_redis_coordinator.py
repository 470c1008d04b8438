"""RedisCoordinator against the machine's Redis: membership, TTL, locks, outages."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from cronman.config import Settings
from cronman.coordination import make_coordinator
from cronman.coordination.base import TAKEN, NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.coordination.redis import CLAIM_CHUNK, RedisCoordinator
from cronman.errors import CoordinatorUnavailable
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.redis

STARTED = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture
def settings(redis_url) -> Iterator[Settings]:
    prefix = f"cmt-{uuid.uuid4().hex[:10]}"
    yield Settings(redis_url=redis_url, redis_key_prefix=prefix, heartbeat_ttl=1.0, node_id="a")
    raw = redis.Redis.from_url(redis_url)
    for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
        raw.delete(key)
    raw.close()


@pytest.fixture
def raw(settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def make(settings) -> Iterator:
    made: list[RedisCoordinator] = []

    def factory(node_id: str = "a", **changes) -> RedisCoordinator:
        coord = RedisCoordinator(settings.with_(node_id=node_id, **changes))
        made.append(coord)
        return coord

    yield factory
    for coord in made:
        coord.close()


def _wait_gone(raw: redis.Redis, key: str, timeout: float = 10.0) -> None:
    """Wait for ``key`` to expire: polled, so a loaded machine only makes it slower."""
    deadline = time.monotonic() + timeout
    while raw.exists(key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not raw.exists(key)


def info(node_id: str, **stats) -> NodeInfo:
    return NodeInfo(id=node_id, address=f"10.0.0.1:{node_id}", started_at=STARTED, stats=stats)


def test_join_heartbeat_live_members_leave(make, raw, settings):
    a, b = make("a"), make("b")
    a.join(info("a", owned_jobs=10))
    b.join(info("b"))
    members = a.live_members()
    assert [m.id for m in members] == ["a", "b"]
    assert b.live_members() == members
    first = members[0]
    assert first.address == "10.0.0.1:a"
    assert first.started_at == STARTED
    assert first.stats == {"owned_jobs": 10}
    # last_heartbeat is the Redis server's clock, not ours.
    server_s, server_us = raw.time()
    server_now = server_s + server_us / 1e6
    assert abs(first.last_heartbeat.timestamp() - server_now) < 1.0

    time.sleep(0.02)
    a.heartbeat(info("a", owned_jobs=11))
    again = b.live_members()[0]
    assert again.stats == {"owned_jobs": 11}
    assert again.last_heartbeat > first.last_heartbeat

    b.leave("b")
    b.leave("b")  # idempotent
    assert [m.id for m in a.live_members()] == ["a"]
    assert not raw.exists(f"{settings.redis_key_prefix}:member:b")


def test_key_layout(make, raw, settings):
    p = settings.redis_key_prefix
    a = make("a")
    a.join(NodeInfo(id="a", address="", started_at=None, stats={}))
    deadline = raw.zscore(f"{p}:members", "a")
    fields = raw.hgetall(f"{p}:member:a")
    assert fields["id"] == "a"
    assert fields["started_at"] == ""
    assert fields["ttl_ms"] == "1000"
    assert int(deadline) == int(fields["last_heartbeat"]) + 1000
    assert 0 < raw.pttl(f"{p}:member:a") <= 1000
    assert a.claim_fires([("job-1", 1700000000123)], 5000) == [True]
    lock = f"{p}:lock:job-1:1700000000123"
    assert raw.get(lock).startswith("a/")
    assert 4000 < raw.pttl(lock) <= 5000
    [m] = a.live_members()
    assert m.started_at is None and m.stats == {}


def test_member_expires_after_ttl(make, raw, settings):
    a, b = make("a"), make("b")
    a.join(info("a"))
    b.join(info("b"))
    end = time.monotonic() + 1.4
    while time.monotonic() < end:  # a keeps beating, b went silent
        a.heartbeat(info("a"))
        time.sleep(0.2)
    assert [m.id for m in a.live_members()] == ["a"]
    # The stale entry is gone from the index too, and its hash has expired.
    assert raw.zrange(f"{settings.redis_key_prefix}:members", 0, -1) == ["a"]
    assert not raw.exists(f"{settings.redis_key_prefix}:member:b")


def test_deadline_follows_each_members_own_ttl(make):
    short, long_ = make("short"), make("long", heartbeat_ttl=5.0)
    short.join(info("short"))
    long_.join(info("long"))
    time.sleep(1.2)
    assert [m.id for m in short.live_members()] == ["long"]


def test_exactly_one_winner_among_racing_coordinators(make, raw, settings):
    coords = [make("a"), make("b")]
    for round_no in range(5):
        keys = [(f"job-{i}", 1700000000000 + round_no) for i in range(500)]
        results: list[list[bool]] = [[], []]
        barrier = threading.Barrier(2)

        def race(i: int, keys=keys, results=results, barrier=barrier) -> None:
            barrier.wait()
            results[i] = coords[i].claim_fires(keys, 10_000)

        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k, (job_id, fire_ms) in enumerate(keys):
            winners = [i for i in range(2) if results[i][k]]
            assert len(winners) == 1, (job_id, fire_ms)
            holder = raw.get(f"{settings.redis_key_prefix}:lock:{job_id}:{fire_ms}")
            assert holder.split("/")[0] == "ab"[winners[0]]


def test_holder_reclaims_and_others_lose(make):
    a, b = make("a"), make("b")
    keys = [("j", 1), ("j", 2)]
    assert a.claim_fires(keys, 5000) == [True, True]
    assert a.claim_fires(keys, 5000) == [True, True]  # a retried batch keeps its locks
    assert b.claim_fires([*keys, ("j", 3)], 5000) == [False, False, True]
    assert make("a").claim_fires(keys, 5000) == [False, False]  # same node id, new instance
    assert a.claim_fires([], 5000) == []
    with pytest.raises(ValueError):
        a.claim_fires(keys, 0)


def test_a_started_or_taken_over_lock_lives_its_ttl_from_then(make, raw, settings):
    a, b = make("a"), make("b")
    p = settings.redis_key_prefix
    assert a.claim_fires([("j", 20), ("j", 21)], 1000) == [True, True]
    assert a.start_fires([("j", 20)], 60_000) == [1]
    assert 59_000 < raw.pttl(f"{p}:lock:j:20") <= 60_000
    assert raw.get(f"{p}:lock:j:20").startswith("!")
    assert b.take_over_fires([("j", 21)], 60_000) == [TAKEN]
    assert 59_000 < raw.pttl(f"{p}:lock:j:21") <= 60_000
    assert a.start_fires([("j", 21)], 60_000) == [0]  # b has it now


def test_lock_expires(make, raw, settings):
    # The TTL is long enough that a busy machine cannot let it lapse between
    # two calls; the wait polls for the key's expiry rather than guessing it.
    a, b = make("a"), make("b")
    key = f"{settings.redis_key_prefix}:lock:j:10"
    assert a.claim_fires([("j", 10)], 1500) == [True]
    assert 0 < raw.pttl(key) <= 1500
    assert b.claim_fires([("j", 10)], 1500) == [False]
    _wait_gone(raw, key)
    assert b.claim_fires([("j", 10)], 1500) == [True]
    assert a.claim_fires([("j", 10)], 1500) == [False]


def test_batches_larger_than_one_script_call(make):
    a, b = make("a"), make("b")
    keys = [(f"job-{i}", 42) for i in range(CLAIM_CHUNK * 2 + 17)]
    assert b.claim_fires(keys[::3], 5000) == [True] * len(keys[::3])
    won = a.claim_fires(keys, 5000)
    assert won == [i % 3 != 0 for i in range(len(keys))]
    stats = a.stats()
    assert stats["claim_keys"] == len(keys) and stats["claim_batches"] == 1


def test_outcome_marks_keep_the_latest_attempt_and_expire(make, raw, settings):
    p = settings.redis_key_prefix
    a, b = make("a"), make("b")
    a.mark_outcomes([("run-1", 2, '{"s":"succeeded","a":2}'), ("run-2", 1, "retrying|1")], 5000)
    # A stalled node's late mark of an earlier attempt does not replace a
    # later one; a mark of the same attempt (or a later one) does.
    b.mark_outcomes([("run-1", 1, "failed-1"), ("run-2", 1, "failed|1")], 5000)
    assert b.read_outcomes(["run-1", "run-2", "run-3"]) == [
        '{"s":"succeeded","a":2}', "failed|1", None]
    assert raw.get(f"{p}:outcome:run-1") == '2|{"s":"succeeded","a":2}'
    assert 4000 < raw.pttl(f"{p}:outcome:run-2") <= 5000
    a.mark_outcomes([("run-3", 1, "short")], 1000)
    assert a.read_outcomes(["run-3"]) == ["short"]
    assert 0 < raw.pttl(f"{p}:outcome:run-3") <= 1000
    _wait_gone(raw, f"{p}:outcome:run-3")
    assert a.read_outcomes(["run-3"]) == [None]
    a.mark_outcomes([], 1000)
    assert a.read_outcomes([]) == []
    assert a.stats()["outcome_marks"] == 3 and a.stats()["outcome_batches"] == 2


def test_outcome_batches_larger_than_one_script_call(make):
    a = make("a")
    marks = [(f"run-{i}", 1 + i % 3, f"mark-{i}") for i in range(CLAIM_CHUNK * 2 + 17)]
    a.mark_outcomes(marks, 5000)
    assert a.read_outcomes([run_id for run_id, _, _ in marks]) == [m for _, _, m in marks]
    assert a.stats()["outcome_batches"] == 1


def test_outcome_marks_without_redis_raise(settings):
    dead = RedisCoordinator(settings.with_(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    try:
        with pytest.raises(CoordinatorUnavailable):
            dead.mark_outcomes([("run-1", 1, "m")], 1000)
        with pytest.raises(CoordinatorUnavailable):
            dead.read_outcomes(["run-1"])
    finally:
        dead.close()


def test_unreachable_redis_raises_quickly_and_backs_off(settings):
    dead = RedisCoordinator(settings.with_(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    try:
        started = time.monotonic()
        with pytest.raises(CoordinatorUnavailable):
            dead.heartbeat(info("a"))
        assert time.monotonic() - started < 2.5
        # Within the back-off no connection is even tried.
        started = time.monotonic()
        for call in (
            dead.live_members,
            lambda: dead.claim_fires([("j", 1)], 1000),
            lambda: dead.leave("a"),
            lambda: dead.heartbeat(info("a")),
        ):
            with pytest.raises(CoordinatorUnavailable):
                call()
        assert time.monotonic() - started < 0.1
        assert not dead.ping()
        stats = dead.stats()
        assert stats["unavailable"] == 5
        assert stats["heartbeat_failures"] == 2
        assert stats["shards"] == 1 and stats["shards_up"] == 0
    finally:
        dead.close()


def test_ping_and_stats(make):
    a = make("a")
    assert a.ping()
    a.join(info("a"))
    a.claim_fires([("j", 1)], 1000)
    stats = a.stats()
    assert stats["heartbeats"] == 1
    assert stats["claim_batches"] == 1
    assert stats["shards_up"] == 1 and stats["unavailable"] == 0


def test_make_coordinator_picks_by_settings(settings):
    coord = make_coordinator(settings)
    try:
        assert isinstance(coord, RedisCoordinator)
    finally:
        coord.close()
    local = make_coordinator(settings.with_(redis_url=None))
    assert isinstance(local, InProcessCoordinator)
    assert local.ttl == settings.heartbeat_ttl


def test_a_pulse_goes_through_a_shard_that_backs_off(make):
    """One timeout elsewhere puts the shard in back-off; the pulse (on a
    thread of its own) still tries it -- a live node's pulses must not
    stop -- and its success ends the back-off for every call."""
    a, b = make("a"), make("b")
    b.pulse("b", "x", 3000, [])
    [shard] = a.shards
    for _ in range(4):  # backing off for its longest (2 s): it cannot end meanwhile
        shard.failed(TimeoutError("a claim timed out under load"))
    assert not shard.available()
    with pytest.raises(CoordinatorUnavailable):
        a.claim_fires([("j", 1)], 1000)  # skipped during the back-off
    reading = a.pulse("a", "y", 3000, ["b"])
    assert reading.pulses["b"].payload == "x"
    assert shard.available()
    assert a.claim_fires([("j", 1)], 1000) == [True]
