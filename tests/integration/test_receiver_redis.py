"""RedisDeduplicator against the real Redis: states, TTLs, and a release that only drops its own claim."""

from __future__ import annotations

import time

import pytest
import redis

from cronman.receiver import Claim, RedisDeduplicator

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    yield c
    for key in c.scan_iter("test:dedup:*"):
        c.delete(key)
    c.close()


def test_states_shared_between_deduplicators(client):
    a = RedisDeduplicator(client, prefix="test:dedup:", done_ttl=60)
    b = RedisDeduplicator(client, prefix="test:dedup:", done_ttl=60)
    assert a.claim("r1") is Claim.NEW
    assert b.claim("r1") is Claim.IN_PROGRESS
    a.release("r1")
    assert b.claim("r1") is Claim.NEW
    b.complete("r1")
    assert a.claim("r1") is Claim.DONE
    assert 0 < client.ttl("test:dedup:r1") <= 60


def test_an_expired_claim_is_taken_over_and_the_old_holder_cannot_drop_it(client):
    slow = RedisDeduplicator(client, prefix="test:dedup:", processing_ttl=1)
    other = RedisDeduplicator(client, prefix="test:dedup:")
    assert slow.claim("r2") is Claim.NEW
    time.sleep(1.2)
    assert other.claim("r2") is Claim.NEW  # the first holder looks dead
    slow.release("r2")  # its late failure must not free the new holder's claim
    assert slow.claim("r2") is Claim.IN_PROGRESS
