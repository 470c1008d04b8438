"""Sentinel URLs, and a real failover survived by one RedisCoordinator instance."""

from __future__ import annotations

import time

import pytest

from cronman.config import Settings
from cronman.coordination.base import NodeInfo
from cronman.coordination.redis import RedisCoordinator
from cronman.coordination.redis_shards import (
    is_sentinel_url,
    parse_sentinel_url,
    split_shard_urls,
)
from cronman.errors import CoordinatorUnavailable
from tests.support.redis_servers import sentinel_setup


def test_parse_sentinel_url():
    spec = parse_sentinel_url("redis+sentinel://10.0.0.1:26379,10.0.0.2:26380/mymaster")
    assert spec.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert spec.service == "mymaster"
    assert (spec.db, spec.password, spec.username, spec.ssl) == (0, None, None, False)

    spec = parse_sentinel_url(
        "redis+sentinel://:s%40cret@h1,h2:1,[::1]:26381/svc?db=3&sentinel_password=pw"
        "&socket_timeout=0.2"
    )
    assert spec.sentinels == [("h1", 26379), ("h2", 1), ("::1", 26381)]
    assert spec.password == "s@cret" and spec.username is None
    assert spec.db == 3 and spec.sentinel_password == "pw"
    assert spec.options == {"socket_timeout": 0.2}

    assert parse_sentinel_url("redis+sentinel://u:p@h:1/svc/5").db == 5
    assert parse_sentinel_url("redis+sentinels://h:1/svc").ssl


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://h:1",  # no service
        "redis+sentinel:///svc",  # no host
        "redis+sentinel://h:x/svc",  # bad port
        "redis+sentinel://h:1/svc?bogus=1",
        "redis://h:1/0",
    ],
)
def test_bad_sentinel_urls(url):
    with pytest.raises(ValueError):
        parse_sentinel_url(url)


def test_url_kinds():
    assert is_sentinel_url("redis+sentinel://h:1/s")
    assert not is_sentinel_url("redis://h:1/0,redis://h:2/0")
    assert split_shard_urls(" redis://a:1/0, redis://b:2/0 ,") == [
        "redis://a:1/0",
        "redis://b:2/0",
    ]


@pytest.mark.redis
def test_failover_is_survived_by_the_same_instance():
    with sentinel_setup(down_after_ms=1000, failover_timeout_ms=3000) as setup:
        settings = Settings(
            redis_url=setup.url, redis_key_prefix="cm", heartbeat_ttl=10.0, node_id="a"
        )
        coord = RedisCoordinator(settings)
        other = RedisCoordinator(settings.with_(node_id="b"))
        try:
            coord.join(NodeInfo(id="a"))
            assert coord.claim_fires([("job", 1)], 60_000) == [True]
            assert other.claim_fires([("job", 1)], 60_000) == [False]
            old_primary = setup.primary.port
            assert setup.primary_port() == old_primary
            # The first write must reach the replica before the crash, or
            # the failover would rightly lose it.
            with setup.primary.client() as c:
                assert c.wait(1, 2000) == 1

            setup.primary.kill()
            killed_at = time.monotonic()

            failures = 0
            recovered_after = None
            n = 0
            while time.monotonic() - killed_at < 15:
                n += 1
                try:
                    coord.heartbeat(NodeInfo(id="a"))
                    won = coord.claim_fires([("job", 1000 + n)], 60_000)
                except CoordinatorUnavailable:
                    failures += 1
                    time.sleep(0.2)
                    continue
                assert won == [True]
                recovered_after = time.monotonic() - killed_at
                break
            assert recovered_after is not None, "no new primary within 15 s"
            assert recovered_after < 10, recovered_after
            assert failures >= 1  # it really was down for a while
            setup.wait_primary(setup.replica.port)

            # Same instances, no restart: membership and locks on the new primary.
            assert [m.id for m in coord.live_members()] == ["a"]
            assert other.claim_fires([("job", 1), ("job", 1000 + n)], 60_000) == [False, False]
            assert coord.claim_fires([("job", 1)], 60_000) == [True]  # replicated lock kept
            assert coord.stats()["unavailable"] == failures
        finally:
            coord.close()
            other.close()
