"""Clock skew (SPEC §6): a node whose clock is off fires nothing early.

Three real nodes; one runs under libfaketime 2 s fast, one 2 s slow (Debian's
``faketime``: the process's wall clock moves, its monotonic clock does not).
Every node estimates its offset to the Redis server's clock; the two skewed
ones are past ``CRONMAN_MAX_CLOCK_SKEW`` (1 s), so they stop claiming and say
so, and the jobs' other owners fire everything on time.
"""

from __future__ import annotations

import os
import time

import pytest

from cronman.timeutil import now_ms
from tests.cluster.counting import describe_missing, pct, tally
from tests.cluster.harness import Cluster, Fires

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
EARLY_BOUND_MS = 50


def _faketime(offset: str) -> dict[str, str]:
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset, "FAKETIME_DONT_RESET": "1"}


@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB), reason="Debian's faketime is missing")
def test_skewed_nodes_fire_nothing_early_and_step_back(cluster: Cluster, fires: Fires):
    fast = cluster.start_node("fast", wait=False, env=_faketime("+2s"))
    slow = cluster.start_node("slow", wait=False, env=_faketime("-2s"))
    good = cluster.start_node("good", wait=False)
    for node in (fast, slow, good):
        cluster.wait_ready(node)
    workload = fires.create_jobs(cluster.database_url, count=60, every_s=1)
    time.sleep(12)
    cluster.assert_all_running()
    metrics = {n: cluster.metrics(n) for n in ("fast", "slow", "good")}
    end = now_ms() - 2000
    fires.stop()
    arrivals = fires.arrivals()
    # Nothing arrives early, whatever a node's clock says.
    early = [a for a in arrivals
             if a.scheduled_ms is not None and a.arrived_ms < a.scheduled_ms - EARLY_BOUND_MS]
    assert not early, (len(early), sorted(a.lateness_ms or 0 for a in early)[:5])
    # Nothing doubled, nothing missed once the nodes have read each other's pulses.
    settled = workload.base_ms + 3000
    t = tally(workload, fires.job_ids, arrivals, settled, end)
    assert t.expected > 300
    assert not t.double_fires and not t.unexpected, t.summary()
    assert not t.missing, describe_missing(t, fires.job_ids)
    # The skewed nodes know their offset and step back; the good one does not.
    assert metrics["fast"]["cronman_clock_offset_seconds"] == pytest.approx(2.0, abs=0.2)
    assert metrics["slow"]["cronman_clock_offset_seconds"] == pytest.approx(-2.0, abs=0.2)
    assert abs(metrics["good"]["cronman_clock_offset_seconds"]) < 0.1
    assert metrics["fast"]["cronman_clock_skewed"] == 1
    assert metrics["slow"]["cronman_clock_skewed"] == 1
    assert metrics["good"]["cronman_clock_skewed"] == 0
    late = t.lateness()
    assert pct(late, 99) < 250, t.summary()
