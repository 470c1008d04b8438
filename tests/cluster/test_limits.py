"""Limits held cluster-wide: three real nodes on one Redis, a 1,000-job herd
at one receiver that counts its requests in flight and per second, under a
limit of 100 starts a second and 20 at once. The receiver never sees more,
every fire arrives, none twice; the waits are counted."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest

from cronman.api.validation import validate_job
from cronman.ids import new_job_id
from cronman.limits import parse_limit
from cronman.schedules import parse_schedule
from cronman.store import open_store
from cronman.timeutil import format_rfc3339, utcnow
from tests.cluster.harness import Cluster
from tests.support.receiver import Receiver, Reply

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HERD = 1000
RATE = 100
CONCURRENCY = 20
ANSWER_DELAY = 0.2  # 20 at once answering in 0.2 s: 100/s, the rate


def herd_jobs(database_url: str, url: str, at: str, count: int) -> list[str]:
    """``count`` jobs firing once at ``at`` (validated once, copied)."""
    now = utcnow()
    template = validate_job({"name": "herd-0", "schedule": {"kind": "once", "at": at},
                             "target": {"kind": "http", "url": url},
                             "misfire": {"policy": "fire_all", "grace": 120}},
                            job_id=new_job_id(), now=now)
    specs = []
    for i in range(count):
        job_id = new_job_id()
        spec = dict(template, id=job_id, name=f"herd-{i}")
        spec["schedule"] = parse_schedule(template["schedule"], job_id=job_id,
                                          created_at=now).to_dict()
        specs.append(spec)
    store = open_store(database_url)
    try:
        store.limits.create_limit(parse_limit({
            "name": "receiver", "match": {"host": "127.0.0.1"}, "rate": RATE,
            "concurrency": CONCURRENCY}), by=None)
        return [j.id for j in store.jobs.create_jobs(specs)]
    finally:
        store.close()


@pytest.mark.counts_only
def test_a_herd_on_three_nodes_is_held_to_the_limit_and_every_fire_arrives_once(
        cluster: Cluster):
    with Receiver() as rx:
        rx.set_default(Reply(status=204, delay=ANSWER_DELAY))
        cluster.start(3)
        at = format_rfc3339((utcnow() + timedelta(seconds=4)).replace(microsecond=0))
        ids = herd_jobs(cluster.database_url, rx.url("/herd"), at, HERD)
        deadline = time.monotonic() + 40
        while len(rx.requests) < HERD and time.monotonic() < deadline:
            time.sleep(0.25)
            cluster.assert_all_running()
        time.sleep(1.0)  # room for a double fire to show
        waits = cluster.metric_total("cronman_limit_waits_total")
        double = cluster.metric_total("cronman_double_fires_total")
        requests = rx.requests
        in_flight, per_second = rx.max_in_flight_for("/herd"), rx.max_per_second("/herd")
    arrived = sorted(r.arrived_at for r in requests)
    took = arrived[-1] - arrived[0] if arrived else 0.0
    print(f"herd of {HERD} on 3 nodes: max in flight {in_flight} (limit {CONCURRENCY}), "
          f"max per second {per_second} (limit {RATE}), {len(requests)} requests in "
          f"{took:.1f} s ({len(requests) / max(took, 0.001):.0f}/s), {waits:.0f} waits")
    firsts = Counter(r.header("Cronman-Job-Id") for r in requests)
    assert set(firsts) == set(ids), (len(set(ids) - set(firsts)), cluster.describe())
    assert max(firsts.values()) == 1, firsts.most_common(3)
    assert double == 0
    assert in_flight <= CONCURRENCY
    assert per_second <= RATE
    assert waits >= HERD - 2 * RATE
