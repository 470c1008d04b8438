"""RedisCoordinator over three real redis-server shards: union, placement, failover."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cronman.config import Settings
from cronman.coordination.base import NodeInfo
from cronman.coordination.redis import RedisCoordinator
from cronman.errors import CoordinatorUnavailable
from tests.support.redis_servers import RedisProcess, redis_servers, wait_until

pytestmark = pytest.mark.redis

PREFIX = "cm"


@pytest.fixture
def shards() -> Iterator[list[RedisProcess]]:
    with redis_servers(3) as servers:
        yield servers


@pytest.fixture
def make(shards) -> Iterator:
    url = ",".join(s.url for s in shards)
    made: list[RedisCoordinator] = []

    def factory(node_id: str) -> RedisCoordinator:
        settings = Settings(
            redis_url=url, redis_key_prefix=PREFIX, heartbeat_ttl=5.0, node_id=node_id
        )
        coord = RedisCoordinator(settings)
        made.append(coord)
        return coord

    yield factory
    for coord in made:
        coord.close()


def locks_on(server: RedisProcess) -> set[str]:
    with server.client(decode_responses=True) as c:
        return set(c.scan_iter(match=f"{PREFIX}:lock:*", count=1000))


def members_on(server: RedisProcess) -> list[str]:
    with server.client(decode_responses=True) as c:
        return c.zrange(f"{PREFIX}:members", 0, -1)


def test_membership_is_written_everywhere_and_read_as_union(shards, make):
    a, b = make("a"), make("b")
    a.join(NodeInfo(id="a", address="x"))
    b.join(NodeInfo(id="b", address="y"))
    assert all(members_on(s) == ["a", "b"] for s in shards)
    # Shards that lost a member's entry (restart without persistence) do not
    # hide it while one shard still has a fresh heartbeat.
    for s in shards[:2]:
        with s.client() as c:
            c.zrem(f"{PREFIX}:members", "a")
            c.delete(f"{PREFIX}:member:a")
    assert [m.id for m in b.live_members()] == ["a", "b"]
    assert b.live_members()[0].address == "x"
    # The freshest heartbeat wins when shards disagree.
    with shards[2].client() as c:
        c.hset(f"{PREFIX}:member:b", "address", "stale")
    time.sleep(0.01)
    with shards[0].client() as c:
        beat = int(c.hget(f"{PREFIX}:member:b", "last_heartbeat"))
        c.hset(f"{PREFIX}:member:b", mapping={"address": "fresh", "last_heartbeat": beat + 50})
    assert {m.id: m.address for m in a.live_members()}["b"] == "fresh"


def test_locks_spread_over_shards_one_copy_each(shards, make):
    a, b = make("a"), make("b")
    keys = [(f"job-{i}", 1700000000000) for i in range(600)]
    won_a = a.claim_fires(keys, 30_000)
    won_b = b.claim_fires(keys, 30_000)
    assert all(won_a) and not any(won_b)
    placed = [locks_on(s) for s in shards]
    assert sum(len(p) for p in placed) == len(keys)  # each lock on exactly one shard
    assert all(len(p) > 600 / 3 * 0.7 for p in placed), [len(p) for p in placed]
    assert a.stats()["claim_failovers"] == 0


def test_outcome_marks_spread_over_shards_and_a_dead_shard_loses_only_its_own(shards, make):
    a, b = make("a"), make("b")
    marks = [(f"run-{i}", 1, f"mark-{i}") for i in range(300)]
    a.mark_outcomes(marks, 30_000)
    placed = []
    for server in shards:
        with server.client(decode_responses=True) as c:
            placed.append({k.rsplit(":", 1)[1] for k in c.scan_iter(match=f"{PREFIX}:outcome:*")})
    assert sum(len(p) for p in placed) == len(marks) and all(placed)
    run_ids = [run_id for run_id, _, _ in marks]
    assert b.read_outcomes(run_ids) == [m for _, _, m in marks]
    shards[1].kill()
    # Marks on the dead shard read as absent (their runs are sent again, as
    # without marks); the others are still found.
    assert b.read_outcomes(run_ids) == [None if run_id in placed[1] else m
                                        for run_id, _, m in marks]


def test_sigkill_one_shard_then_restart(shards, make):
    a, b = make("a"), make("b")
    a.join(NodeInfo(id="a"))
    b.join(NodeInfo(id="b"))
    keys = [(f"job-{i}", 1) for i in range(300)]
    assert all(a.claim_fires(keys, 30_000))
    dead = shards[1]
    dead_keys = locks_on(dead)
    assert dead_keys

    dead.kill()

    # Membership keeps working on the two survivors.
    a.heartbeat(NodeInfo(id="a"))
    b.heartbeat(NodeInfo(id="b"))
    assert [m.id for m in a.live_members()] == ["a", "b"]
    # Locks keep working: new fires whose first shard is dead fail over to
    # the next shard in their order, and still have exactly one winner.
    fresh = [(f"job-{i}", 2) for i in range(300)]
    started = time.monotonic()
    won_a = a.claim_fires(fresh, 30_000)
    won_b = b.claim_fires(fresh, 30_000)
    assert all(won_a) and not any(won_b)
    assert time.monotonic() - started < 3.0
    stats = a.stats()
    assert stats["claim_failovers"] > 50
    assert stats["shard_errors"] >= 1
    assert stats["shards_up"] == 2
    # Locks that lived on the dead shard are gone: a survivor's fence (the
    # database) is what guards those fires now; Redis hands them out again.
    lost = [k for k in keys if f"{PREFIX}:lock:{k[0]}:{k[1]}" in dead_keys]
    assert all(b.claim_fires(lost, 30_000))

    # Calls within the back-off do not wait on the dead shard.
    started = time.monotonic()
    for _ in range(20):
        a.claim_fires([("quick", 3)], 1000)
    assert time.monotonic() - started < 0.5

    dead.start()  # same port, empty

    def rejoined() -> bool:
        a.heartbeat(NodeInfo(id="a"))
        return members_on(dead) == ["a"]

    wait_until(rejoined, 5.0, "the restarted shard to take heartbeats again", interval=0.1)
    later = [(f"job-{i}", 4) for i in range(300)]
    assert all(a.claim_fires(later, 30_000))
    assert len(locks_on(dead)) > 50  # its share of new locks is back on it
    assert a.stats()["shards_up"] == 3


def test_all_shards_down_raises(shards, make):
    a = make("a")
    a.join(NodeInfo(id="a"))
    for s in shards:
        s.kill()
    with pytest.raises(CoordinatorUnavailable):
        a.heartbeat(NodeInfo(id="a"))
    with pytest.raises(CoordinatorUnavailable):
        a.live_members()
    with pytest.raises(CoordinatorUnavailable):
        a.claim_fires([("j", 1)], 1000)
    assert not a.ping()
    stats = a.stats()
    assert stats["unavailable"] == 3 and stats["shards_up"] == 0
