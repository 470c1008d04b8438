"""The membership history: joined, left, expired -- on Redis (one or two
shards, the machine's server) and in process; bounded."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
import redis

from cronman.config import Settings
from cronman.coordination.base import MEMBERSHIP_LOG_MAX, NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.coordination.redis import RedisCoordinator
from cronman.timeutil import utcnow

EPOCH_PAST = utcnow() - timedelta(hours=1)


def info(node_id: str) -> NodeInfo:
    return NodeInfo(id=node_id, address=f"10.0.0.9:{node_id}",
                    started_at=utcnow().replace(microsecond=0))


def kinds(coordinator, since=None):
    return [(c.node_id, c.kind) for c in coordinator.membership_changes(since or EPOCH_PAST)]


@pytest.fixture
def redis_settings(redis_url):
    prefix = f"cmm-{uuid.uuid4().hex[:10]}"
    yield Settings(redis_url=redis_url, redis_key_prefix=prefix, heartbeat_ttl=0.5,
                   node_id="a")
    raw = redis.Redis.from_url(redis_url)
    for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
        raw.delete(key)
    raw.close()


@pytest.mark.redis
@pytest.mark.parametrize("shards", [1, 2])
def test_redis_records_joins_leaves_and_expiries(redis_settings, shards):
    url = ",".join([redis_settings.redis_url] * shards)
    settings = redis_settings.with_(redis_url=url, heartbeat_ttl=5.0)
    a = RedisCoordinator(settings.with_(node_id="a"))
    b = RedisCoordinator(settings.with_(node_id="b"))
    c = RedisCoordinator(settings.with_(node_id="c", heartbeat_ttl=0.3))
    try:
        for step in (lambda: a.join(info("a")), lambda: b.join(info("b")),
                     lambda: a.heartbeat(info("a")),  # a beat of a member is no change
                     lambda: b.leave("b"),
                     lambda: b.leave("b"),  # leaving twice is one change
                     lambda: c.join(info("c"))):
            step()
            time.sleep(0.005)  # each change in a millisecond of its own
        time.sleep(0.5)  # c's deadline passes
        a.heartbeat(info("a"))
        got = a.membership_changes(EPOCH_PAST)
        assert [(x.node_id, x.kind) for x in got] == [
            ("c", "expired"), ("c", "joined"), ("b", "left"), ("b", "joined"), ("a", "joined")]
        by_kind = {(x.node_id, x.kind): x for x in got}
        assert by_kind[("b", "joined")].address == "10.0.0.9:b"
        assert by_kind[("b", "joined")].started_at is not None
        assert by_kind[("b", "left")].started_at == by_kind[("b", "joined")].started_at
        # An expiry is dated by the member's deadline: its last beat plus its TTL.
        gap = by_kind[("c", "expired")].at - by_kind[("c", "joined")].at
        assert abs(gap - timedelta(seconds=0.3)) < timedelta(milliseconds=20)
        # ``since`` narrows.
        left_at = by_kind[("b", "left")].at
        assert kinds(a, left_at) == [("c", "expired"), ("c", "joined"), ("b", "left")]
    finally:
        for coord in (a, b, c):
            coord.close()


@pytest.mark.redis
def test_redis_reader_records_expiry_of_a_dead_cluster(redis_settings):
    a = RedisCoordinator(redis_settings)
    reader = RedisCoordinator(redis_settings.with_(node_id="api"))
    try:
        a.join(info("a"))
        time.sleep(0.7)  # nobody heartbeats: the read itself finds a expired
        assert kinds(reader)[:2] == [("a", "expired"), ("a", "joined")]
        assert reader.live_members() == []
    finally:
        a.close()
        reader.close()


@pytest.mark.redis
def test_redis_history_is_bounded(redis_settings):
    a = RedisCoordinator(redis_settings)
    raw = redis.Redis.from_url(redis_settings.redis_url)
    try:
        for i in range(MEMBERSHIP_LOG_MAX + 300):
            a.join(info(f"n{i}"))
            a.leave(f"n{i}")
        length = raw.xlen(f"{redis_settings.redis_key_prefix}:membership")
        assert MEMBERSHIP_LOG_MAX <= length < MEMBERSHIP_LOG_MAX * 1.3
        assert len(a.membership_changes(EPOCH_PAST)) <= MEMBERSHIP_LOG_MAX
    finally:
        raw.close()
        a.close()


def test_in_process_history():
    now = [1000.0]
    coord = InProcessCoordinator(ttl=10, clock=lambda: now[0])

    def at(t):
        now[0] = t

    coord.join(info("a"))
    at(1001)
    coord.join(info("b"))
    at(1002)
    coord.heartbeat(info("a"))
    at(1003)
    coord.leave("b")
    at(1005)
    coord.heartbeat(info("a"))
    at(1007)
    coord.join(info("c"))
    at(1020)  # a (last beat 1005) and c (1007) miss their beats
    assert kinds(coord) == [("c", "expired"), ("a", "expired"), ("c", "joined"),
                            ("b", "left"), ("b", "joined"), ("a", "joined")]
    expired = {c.node_id: c.at for c in coord.membership_changes(EPOCH_PAST)
               if c.kind == "expired"}
    assert expired["c"] - expired["a"] == timedelta(seconds=2)
    assert coord.live_members() == []
    for i in range(MEMBERSHIP_LOG_MAX + 10):
        coord.join(info(f"n{i}"))
    assert len(coord.membership_changes(EPOCH_PAST - timedelta(days=1))) == MEMBERSHIP_LOG_MAX
