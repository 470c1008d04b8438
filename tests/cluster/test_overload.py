"""Overload: past capacity, live nodes deliver at capacity and nobody takes
anybody's fires over (the takeover issue: a busy node is late, not gone).

Three real nodes, each able to run only 4 attempts at once, against a
receiver that answers after 200 ms: about 20 fires/s per node, 60/s for the
cluster. The jobs ask for 120 fires/s. Every node falls behind and keeps
going; its pulses show its dispatch moving, so the jobs' second owners wait
for it instead of taking its fires.

A node far behind holds its own fires back unclaimed; killed then, none of
them is lost: the jobs' second owners take every fire they watched for it
(those past their grace as the misfire policy says).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from cronman.timeutil import format_rfc3339, from_ms, now_ms, parse_rfc3339, to_ms
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
        time.sleep(10)
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


HELD_IN_FLIGHT = 8  # 40 fires/s a node, 120/s the cluster
HELD_OFFERED = 240  # jobs firing every second, for HELD_WINDOW_S
HELD_WINDOW_S = 12


@pytest.mark.counts_only
def test_a_first_owner_killed_while_it_holds_fires_back_loses_none(cluster: Cluster):
    cluster.env["CRONMAN_MAX_IN_FLIGHT"] = str(HELD_IN_FLIGHT)
    with Receiver() as rx:
        rx.set_default(Reply(status=204, delay=ANSWER_DELAY))
        cluster.start(3)
        base = (now_ms() // 1000 + 2) * 1000
        end = base + HELD_WINDOW_S * 1000
        # fire_all with a short grace: every fire time is owed, and those the
        # victim held longer than the grace go through the misfire policy.
        w = Workload(count=HELD_OFFERED, every_ms=1000, base_ms=base, start_ms=base,
                     end_ms=end, misfire="fire_all", grace_s=2)
        ids = create_jobs_in_store(cluster.database_url, w, rx.url("/hook"), "held")
        # The victim: a node that has held fires back for longer than their
        # grace (the fires it holds are then misfires for their watchers).
        victim, held_since = None, {}
        while victim is None and now_ms() < end - 1000:
            time.sleep(0.2)
            for node in cluster.running():
                if cluster.metrics(node.node_id).get("cronman_fires_held_back", 0) == 0:
                    held_since.pop(node.node_id, None)
                elif now_ms() - held_since.setdefault(node.node_id, now_ms()) > 3000:
                    victim = node.node_id
        assert victim is not None, f"no node held fires back for 3 s: {held_since}"
        cluster.kill(victim)
        owed = {(job_id, format_rfc3339(from_ms(t)))
                for i, job_id in enumerate(ids) for t in w.fires_of(i, base, end)}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = {(r.header("Cronman-Job-Id"), r.header("Cronman-Scheduled-For"))
                    for r in list(rx.requests)}
            if owed <= seen:
                break
            time.sleep(1)
        time.sleep(2)  # room for a double fire to show
        double = cluster.metric_total("cronman_double_fires_total")
        requests = list(rx.requests)
    seen = {(r.header("Cronman-Job-Id"), r.header("Cronman-Scheduled-For")) for r in requests}
    missing = owed - seen
    print(f"victim {victim}; {len(owed)} owed, {len(missing)} missing, "
          f"{len(requests)} requests")
    assert not missing, (len(missing), sorted(missing)[:5], cluster.describe())
    assert double == 0
    firsts = Counter((r.header("Cronman-Job-Id"), r.header("Cronman-Scheduled-For"))
                     for r in requests if r.header("Cronman-Attempt") == "1")
    assert max(firsts.values()) == 1, firsts.most_common(3)


def _readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
