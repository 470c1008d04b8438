"""The limits' shared counters against the machine's Redis (``limits.lua``),
two counter objects standing for two nodes, and the same rules in memory
(``LocalLimitCounters``, the standalone's and the fair share's)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from cronman.config import Settings
from cronman.coordination.limit_counters import (
    OUTRANKED,
    QUARANTINED,
    UNTIL_RELEASED,
    Ask,
    CountersRestarted,
    LimitSpec,
)
from cronman.coordination.limits_memory import LocalLimitCounters
from cronman.coordination.redis_limits import RedisLimitCounters
from cronman.errors import CoordinatorUnavailable

pytestmark = pytest.mark.redis

LEASE = 5000


@pytest.fixture
def settings(redis_url) -> Iterator[Settings]:
    prefix = f"cml-{uuid.uuid4().hex[:10]}"
    yield Settings(redis_url=redis_url, redis_key_prefix=prefix)
    raw = redis.Redis.from_url(redis_url)
    for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
        raw.delete(key)
    raw.close()


@pytest.fixture
def pair(settings) -> Iterator[tuple[RedisLimitCounters, RedisLimitCounters]]:
    a, b = RedisLimitCounters(settings), RedisLimitCounters(settings)
    for node, counters in (("n1", a), ("n2", b)):  # of the counters' epoch from now on
        asyncio.run(counters.restore(node, [], LEASE))
    yield a, b
    a.close()
    b.close()


def run(coro):
    return asyncio.run(coro)


def asks(prefix: str, n: int, limits: tuple[int, ...] = (0,)) -> list[Ask]:
    return [Ask(f"{prefix}{i}/1", limits) for i in range(n)]


async def take(counters, node, specs, batch, margin=0):
    return await counters.take(node, specs, batch, lease_ms=LEASE, margin_ms=margin)


def test_concurrency_is_shared_by_two_nodes_and_released(pair):
    a, b = pair
    spec = [LimitSpec("billing", concurrency=5)]

    async def scenario():
        first = await take(a, "n1", spec, asks("a", 3))
        second = await take(b, "n2", spec, asks("b", 4))
        return first, second

    first, second = run(scenario())
    assert [x.granted for x in first] == [True] * 3
    assert [x.granted for x in second] == [True, True, False, False]
    refused = second[2]
    assert (refused.limit, refused.used, refused.wait_ms) == (0, 5, UNTIL_RELEASED)
    assert a.usage(["billing"], [1000]) == [(5, 0)]

    async def release_and_retry():
        await a.release("n1", [("billing", "a0/1")])
        return await take(b, "n2", spec, asks("b", 4)[2:])

    again = run(release_and_retry())
    assert [x.granted for x in again] == [True, False]  # one slot freed, one granted


def test_asking_again_for_the_same_attempt_counts_it_once(pair):
    a, _ = pair
    spec = [LimitSpec("once", count=10, window_ms=1000, concurrency=2)]
    one = asks("x", 1)
    assert run(take(a, "n1", spec, one))[0].granted
    assert run(take(a, "n1", spec, one))[0].granted  # a lost reply asked again
    assert a.usage(["once"], [1000]) == [(1, 1)]


def test_rate_counts_starts_of_both_nodes_in_a_sliding_window(pair):
    a, b = pair
    spec = [LimitSpec("rate", count=10, window_ms=1000)]
    got_a = run(take(a, "n1", spec, asks("a", 6)))
    got_b = run(take(b, "n2", spec, asks("b", 6)))
    assert sum(x.granted for x in got_a + got_b) == 10
    refused = got_b[4]
    assert not refused.granted and refused.used == 10 and 900 <= refused.wait_ms <= 1001
    time.sleep(refused.wait_ms / 1000 + 0.02)
    later = run(take(b, "n2", spec, asks("b", 6)[4:]))
    assert all(x.granted for x in later)


def test_a_refused_limit_refuses_the_later_asks_of_the_batch(pair):
    a, _ = pair
    specs = [LimitSpec("host", concurrency=1), LimitSpec("ns", concurrency=10)]
    batch = [Ask("p/1", (0, 1)), Ask("q/1", (0, 1)), Ask("r/1", (1,))]
    got = run(take(a, "n1", specs, batch))
    assert [x.granted for x in got] == [True, False, True]
    # Nothing was taken from "ns" for the refused ask.
    assert a.usage(["host", "ns"], [1000, 1000]) == [(1, 0), (2, 0)]


def test_token_bucket_spreads_the_starts(pair):
    a, _ = pair
    spec = [LimitSpec("bucket", count=100, window_ms=1000, burst=2, per_ms=0.1)]
    got = run(take(a, "n1", spec, asks("t", 4)))
    assert [x.granted for x in got] == [True, True, False, False]
    assert 1 <= got[2].wait_ms <= 10


def test_a_lower_fire_gives_way_to_a_higher_one_waiting_on_another_node(pair):
    a, b = pair
    spec = [LimitSpec("prio", concurrency=1)]

    async def scenario():
        low = await b.take("n2", spec, [Ask("low/1", (0,), 0)], lease_ms=LEASE, margin_ms=0)
        high = await a.take("n1", spec, [Ask("high/1", (0,), 5)], lease_ms=LEASE,
                            margin_ms=0, waiting={"prio": 5})
        await b.release("n2", [("prio", "low/1")])
        # A slot is free, but n1's fire of priority 5 waits: n2's of 0 gives way.
        outranked = await b.take("n2", spec, [Ask("low2/1", (0,), 0), Ask("same/1", (0,), 5)],
                                 lease_ms=LEASE, margin_ms=0)
        granted = await a.take("n1", spec, [Ask("high/1", (0,), 5)], lease_ms=LEASE,
                               margin_ms=0)
        return low, high, outranked, granted

    low, high, outranked, granted = run(scenario())
    assert low[0].granted and not high[0].granted
    assert not outranked[0].granted and outranked[0].used == OUTRANKED
    assert outranked[1].granted is False  # the batch's order: the limit closed at the first
    assert granted[0].granted


def test_the_slots_of_a_node_that_stops_renewing_are_given_back(pair):
    a, b = pair
    spec = [LimitSpec("lease", concurrency=2)]

    async def scenario():
        await a.take("dead", spec, asks("d", 2), lease_ms=300, margin_ms=0)
        refused = await b.take("live", spec, asks("l", 1), lease_ms=LEASE, margin_ms=0)
        await asyncio.sleep(0.4)
        granted = await b.take("live", spec, asks("l", 1), lease_ms=LEASE, margin_ms=0)
        return refused, granted

    refused, granted = run(scenario())
    assert not refused[0].granted and granted[0].granted


def test_renewed_slots_outlive_their_first_lease(pair):
    a, b = pair
    spec = [LimitSpec("renewed", concurrency=1)]

    async def scenario():
        await a.take("n1", spec, asks("r", 1), lease_ms=300, margin_ms=0)
        for _ in range(3):
            await asyncio.sleep(0.15)
            await a.renew("n1", [("renewed", "r0/1")], 300)
        return await b.take("n2", spec, asks("s", 1), lease_ms=LEASE, margin_ms=0)

    assert not run(scenario())[0].granted


def test_a_restarted_redis_learns_what_the_nodes_hold_before_it_grants(pair, settings):
    a, b = pair
    spec = [LimitSpec("restart", count=50, window_ms=1000, concurrency=3)]
    assert all(x.granted for x in run(take(a, "n1", spec, asks("a", 2))))
    raw = redis.Redis.from_url(settings.redis_url)
    for key in raw.scan_iter(match=f"{settings.redis_key_prefix}:*"):
        raw.delete(key)  # what a restart without persistence leaves
    raw.close()
    with pytest.raises(CountersRestarted):
        run(take(b, "n2", spec, asks("b", 1)))

    async def scenario():
        await b.restore("n2", [], LEASE)
        quarantined = await b.take("n2", spec, asks("b", 1), lease_ms=LEASE, margin_ms=0,
                                   quarantine_ms=300)
        # n1 tells what it holds (its mirror): two slots, two starts.
        await a.restore("n1", [("c", "restart", "a0/1", 0), ("c", "restart", "a1/1", 0),
                               ("s", "restart", "a0/1", 100), ("s", "restart", "a1/1", 100)],
                        LEASE)
        await asyncio.sleep(0.35)
        return quarantined, await b.take("n2", spec, asks("b", 2), lease_ms=LEASE,
                                         margin_ms=0, quarantine_ms=300)

    quarantined, after = run(scenario())
    assert not quarantined[0].granted and quarantined[0].used == QUARANTINED
    assert 1 <= quarantined[0].wait_ms <= 300
    assert [x.granted for x in after] == [True, False]  # 2 + 1 of 3 slots
    assert a.usage(["restart"], [1000]) == [(3, 3)]


def test_an_unreachable_redis_raises_unavailable():
    counters = RedisLimitCounters(Settings(redis_url="redis://127.0.0.1:1/0"))
    try:
        with pytest.raises(CoordinatorUnavailable):
            run(take(counters, "n1", [LimitSpec("x", concurrency=1)], asks("a", 1)))
        # It is not asked again for its back-off: a new epoch's quarantine outlasts it.
        assert counters.retry_ms == 2000 and LocalLimitCounters.retry_ms == 0
        with pytest.raises(CoordinatorUnavailable, match="backing off"):
            run(take(counters, "n1", [LimitSpec("x", concurrency=1)], asks("a", 1)))
    finally:
        counters.close()


def test_the_local_counters_follow_the_same_rules():
    now = [1_000_000]
    local = LocalLimitCounters(clock=lambda: now[0])
    specs = [LimitSpec("r", count=3, window_ms=1000), LimitSpec("c", concurrency=2)]
    got = local.take_now("n1", specs, asks("a", 4, (0, 1)), lease_ms=500, margin_ms=20)
    assert [x.granted for x in got] == [True, True, False, False]
    assert got[2].limit == 1 and got[2].wait_ms == UNTIL_RELEASED
    local.release_now("n1", [("c", "a0/1")])
    got = local.take_now("n1", specs, asks("b", 2, (0, 1)), lease_ms=500, margin_ms=20)
    assert [x.granted for x in got] == [True, False]
    assert got[1].limit == 0 and got[1].used == 3 and got[1].wait_ms == 1021
    now[0] += 1021
    local.release_now("n1", [("c", "a1/1"), ("c", "b0/1")])
    assert local.take_now("n1", specs, asks("c", 1, (0, 1)), lease_ms=500,
                          margin_ms=20)[0].granted
