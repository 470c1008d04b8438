"""Overload: past capacity, live nodes deliver at capacity and nobody takes
anybody's fires over (the takeover issue: a busy node is late, not gone).

Three real nodes, each able to run only 4 attempts at once, against a
receiver that answers after 200 ms: about 20 fires/s per node, 60/s for the
cluster. The jobs ask for 120 fires/s. Every node falls behind and keeps
going; its pulses show its dispatch moving, so the jobs' second owners wait
for it instead of taking its fires.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from cronman.timeutil import now_ms, parse_rfc3339, to_ms
from cronman_bench.workload import Workload
from tests.cluster.harness import Cluster
from tests.support.receiver import Receiver, Reply
from tests.support.store_jobs import create_jobs_in_store

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

IN_FLIGHT = 4
ANSWER_DELAY = 0.2
CAPACITY = 3 * IN_FLIGHT / ANSWER_DELAY  # fires/s the cluster can deliver
OFFERED = 120  # fires/s the jobs ask for: twice the capacity


def test_live_nodes_past_capacity_deliver_at_capacity_and_take_nothing_over(cluster: Cluster):
    cluster.env["CRONMAN_MAX_IN_FLIGHT"] = str(IN_FLIGHT)
    with Receiver() as rx:
        rx.set_default(Reply(status=204, delay=ANSWER_DELAY))
        cluster.start(3)
        w = Workload(count=OFFERED, every_ms=1000, base_ms=(now_ms() // 1000 + 2) * 1000)
        create_jobs_in_store(cluster.database_url, w, rx.url("/hook"), "overload")
        time.sleep(2)  # until the first fires are due
        started = time.monotonic()
        before = len(rx.requests)
        time.sleep(15)
        seconds = time.monotonic() - started
        # Behind, and saying so, while ready: overloaded is not down.
        readyz = [_readyz(node.metrics_port) for node in cluster.running()]
        behind = [cluster.metrics(node.node_id).get("cronman_dispatch_backlog_seconds", 0.0)
                  for node in cluster.running()]
        delivered = len(rx.requests) - before
        cluster.assert_all_running()
        takeovers = cluster.metric_total("cronman_fire_takeovers_total")
        double = cluster.metric_total("cronman_double_fires_total")
        requests = list(rx.requests)
    rate = delivered / seconds
    print(f"delivered {rate:.1f}/s of {OFFERED} offered (capacity {CAPACITY:.0f}), "
          f"takeovers {takeovers}")
    assert rate >= 0.9 * CAPACITY, (rate, CAPACITY)
    assert takeovers == 0, cluster.describe()
    assert double == 0
    firsts = Counter((r.header("Cronman-Job-Id"), r.header("Cronman-Scheduled-For"))
                     for r in requests if r.header("Cronman-Attempt") == "1")
    assert max(firsts.values()) == 1, firsts.most_common(3)
    # Behind, but in order: the backlog is the lateness, nothing was skipped.
    lateness = sorted(int(r.arrived_at * 1000) - to_ms(parse_rfc3339(
        r.header("Cronman-Scheduled-For") or "")) for r in requests)
    assert lateness[-1] > 2000  # it did fall behind
    assert all(status == 200 and body["status"] == "ready" for status, body in readyz), readyz
    assert all(body["load"]["state"] == "overloaded" for _, body in readyz), readyz
    assert all(b >= 1.0 for b in behind), behind


def _readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
