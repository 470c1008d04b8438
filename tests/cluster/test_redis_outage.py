"""Redis failures under a firing cluster (SPEC §6): the database fence alone.

The cluster's private redis-server is SIGKILLed and started again on the
same port (every lock and the membership gone), and later stopped for 20 s.
Fires must go on without a duplicate (the run row's uniqueness decides) and
without a gap, and the membership must come back once Redis answers again.
"""

from __future__ import annotations

import pytest

from cronman.timeutil import now_ms
from tests.cluster.counting import describe_missing, pct
from tests.cluster.scenario import run_scenario

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

OUTAGE_S = 20.0


def test_redis_restart_and_20s_outage(cluster, cluster_redis, fires):
    nodes = {"n1", "n2", "n3"}
    rejoined: dict[str, float] = {}

    def restart_redis() -> None:
        cluster_redis.kill()  # SIGKILL: no persistence, every lock is gone
        cluster_redis.start()

    def stop_redis() -> None:
        cluster_redis.stop()

    def start_redis() -> None:
        cluster_redis.start()
        t0 = now_ms()
        # Nodes keep heartbeating through the outage: each is back within a beat.
        rejoined["seconds"] = cluster.wait_members(nodes, timeout=cluster.env_ttl() + 5)
        rejoined["at"] = t0

    out = run_scenario(cluster, fires, nodes=3, window_s=7 + OUTAGE_S + 6, actions=[
        (3.0, "redis restarted", restart_redis),
        (7.0, "redis stopped", stop_redis),
        (7.0 + OUTAGE_S, "redis back", start_redis),
    ])
    print(out.describe("redis"))
    print(f"[redis] membership complete again {rejoined['seconds']:.2f} s after Redis came back")
    t = out.tally
    assert not t.double_fires, f"fired twice: {t.double_fires[:10]}"
    assert not t.redeliveries, f"delivered twice: {t.redeliveries[:10]}"
    assert not t.unexpected, t.unexpected[:5]
    assert not t.missing, (f"{len(t.missing)} fires never arrived:\n"
                           f"{describe_missing(t, fires.job_ids)}")
    # Fires went on during the outage, on time (the fence alone decided).
    down, up = out.at("redis stopped"), out.at("redis back")
    during = t.lateness(down + 1000, up)
    assert len(during) >= 0.9 * fires.workload.rate * (up - down - 1000) / 1000
    assert pct(during, 99) < 1000, f"fires during the outage: p99 {pct(during, 99)} ms"
    # The database fence did the deduplication.
    assert out.metrics["cronman_fence_losses_total"] > 0
    assert out.metrics["cronman_double_fires_total"] == 0
    assert cluster.log_count("double fire:") == 0
