"""Limits held cluster-wide: three real nodes on one Redis, a 1,000-job herd
at one receiver that counts its requests in flight and per second, under a
limit of 100 starts a second and 20 at once. The receiver never sees more,
every fire arrives, none twice, the raised ones first; the waits are
counted, and most of the rate is used while fires wait (the share over the
seconds the nodes' waiting gauge covers, the fault's seconds left out). The
same with a node SIGKILLed, with Redis restarted, and with Redis stopped for
longer than the nodes wait for it (each counts on its fair share meanwhile)
mid-herd."""

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
from cronman_bench.limit_figures import rate_used, waiting_spans
from tests.cluster.harness import TEST_HEARTBEAT_TTL, Cluster
from tests.support.receiver import Receiver, Reply

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HERD = 1000
RATE = 100
CONCURRENCY = 20
ANSWER_DELAY = 0.2  # 20 at once answering in 0.2 s: 100/s, the rate
HIGH = 50  # jobs of a raised priority among the herd
RAISED = 5
# The share of the rate used while fires wait, at least. Quiet, it is 95-97 %;
# three such tests at once on two cores busy with other work gave 83-90 %: 20
# at once answering in 0.2 s allow the rate only if a slot's release and the
# next start cost nothing (`cronman bench --scenario limit-accuracy` reports
# the figure).
RATE_USED = 0.75
# After a fault, what the seconds left counted hold varies more on a busy
# machine (6-10 s counted; the test command runs three such tests at once:
# 62 % and 73 % seen there, 86-100 % in the bench's quiet runs): the bound
# then guards against a limit that stops granting, not the exact share.
RATE_USED_AFTER_FAULT = 0.5
REDIS_AWAY_S = 5.0  # past the 2 s the nodes wait for Redis: their fair shares
# After a fault, seconds left out of the rate used: a killed node's slots are
# held until its heartbeat expires; a Redis that restarted empty grants
# nothing for a renewal interval, the nodes' back-off (2 s) and a second
# while they tell it what they hold.
SETTLE_S = {"node killed": TEST_HEARTBEAT_TTL + 1.0, "redis restarted": 5.0,
            "redis away": 5.0}


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
        spec = dict(template, id=job_id, name=f"herd-{i}", priority=RAISED if i < HIGH else 0)
        spec["schedule"] = parse_schedule(template["schedule"], job_id=job_id,
                                          created_at=now).to_dict()
        specs.append(spec)
    store = open_store(database_url)
    try:
        return [j.id for j in store.jobs.create_jobs(specs)]
    finally:
        store.close()


def receiver_limit(database_url: str) -> None:
    """The limit on the receiver's host. Made before the nodes start, so each
    holds it from its first read: a limit made later holds "within a poll",
    and a node starved of the CPU polls late."""
    store = open_store(database_url)
    try:
        store.limits.create_limit(parse_limit({
            "name": "receiver", "match": {"host": "127.0.0.1"}, "rate": RATE,
            "concurrency": CONCURRENCY}), by=None)
    finally:
        store.close()


# Serial (not counts_only): the share of the rate used is a timing bound.
@pytest.mark.parametrize("fault", ["none", "node killed", "redis restarted", "redis away"])
def test_a_herd_on_three_nodes_is_held_to_the_limit_and_every_fire_arrives(
        cluster: Cluster, cluster_redis, fault: str):
    with Receiver() as rx:
        rx.set_default(Reply(status=204, delay=ANSWER_DELAY))
        receiver_limit(cluster.database_url)
        cluster.start(3)
        at = format_rfc3339((utcnow() + timedelta(seconds=4)).replace(microsecond=0))
        ids = herd_jobs(cluster.database_url, rx.url("/herd"), at, HERD)
        deadline = time.monotonic() + 40 + (REDIS_AWAY_S if fault == "redis away" else 0)
        fault_at = fault_end = None  # time.time() of the fault, and of its end
        waiting: list[tuple[float, float]] = []  # (time, fires waiting on the nodes)
        while len({r.header("Cronman-Job-Id") for r in rx.requests}) < HERD and (
                time.monotonic() < deadline):
            time.sleep(0.25)
            if fault_at is None and len(rx.requests) >= HERD // 3:
                fault_at = time.time()
                if fault == "node killed":
                    cluster.kill("n2")
                elif fault == "redis restarted":
                    cluster_redis.kill()  # SIGKILL: every counter is gone
                    cluster_redis.start()
                elif fault == "redis away":
                    cluster_redis.stop()
                if fault != "redis away":
                    fault_end = time.time()
            elif fault_end is None and fault_at is not None and (
                    time.time() >= fault_at + REDIS_AWAY_S):
                cluster_redis.start()  # empty: a new epoch
                fault_end = time.time()
            asked = time.time()
            now_waiting = cluster.metric_total("cronman_limit_waiting")
            waiting.append(((asked + time.time()) / 2, now_waiting))
            cluster.assert_all_running()
        time.sleep(1.0)  # room for a double fire to show
        waits = cluster.metric_total("cronman_limit_waits_total")
        double = cluster.metric_total("cronman_double_fires_total")
        fair_share = cluster.metric_total("cronman_limit_fair_share_total")
        requests = rx.requests
        in_flight, per_second = rx.max_in_flight_for("/herd"), rx.max_per_second("/herd")
    arrived = sorted(r.arrived_at for r in requests)
    took = arrived[-1] - arrived[0] if arrived else 0.0
    left_out = [] if fault == "none" or fault_at is None or fault_end is None else [
        (fault_at, fault_end + SETTLE_S[fault])]
    used = rate_used(arrived, RATE, waiting_spans(waiting), left_out)
    print(f"[{fault}] herd of {HERD} on 3 nodes: max in flight {in_flight} (limit "
          f"{CONCURRENCY}), max per second {per_second} (limit {RATE}), {len(requests)} "
          f"requests in {took:.1f} s ({len(requests) / max(took, 0.001):.0f}/s), "
          f"{waits:.0f} waits, {fair_share:.0f} batches counted on fair shares")
    print(f"[{fault}] rate used while fires waited: {used.share or 0:.1%} ({used.arrivals} "
          f"requests in {used.seconds} s; {sum(b - a for a, b in left_out):.1f} s "
          f"of the fault left out)")
    firsts = Counter(r.header("Cronman-Job-Id") for r in requests)
    assert set(firsts) == set(ids), (len(set(ids) - set(firsts)), cluster.describe())
    # Priority across the nodes: the raised fires go first, whichever node holds them.
    order = [r.header("Cronman-Job-Id") for r in sorted(requests, key=lambda r: r.arrived_at)]
    last_raised = max(order.index(job_id) for job_id in ids[:HIGH])
    print(f"[{fault}] the last of the {HIGH} raised fires arrived {last_raised + 1}th")
    assert double == 0
    assert in_flight <= CONCURRENCY
    assert per_second <= RATE
    twice = {job for job, n in firsts.items() if n > 1}
    if fault == "node killed":
        # At least once: only what the killed node had in flight goes again.
        assert fault_at is not None and len(twice) <= CONCURRENCY, len(twice)
        for job in twice:
            first = min(r.arrived_at for r in requests if r.header("Cronman-Job-Id") == job)
            assert fault_at - 2.0 <= first <= fault_at + 0.5, (job, first, fault_at)
    else:
        assert not twice, sorted(twice)[:3]
        assert waits >= HERD - 2 * RATE
    if fault == "redis away":  # the sum of the fair shares held it meanwhile
        assert fault_end is not None and fair_share > 0, fair_share
    bound = RATE_USED if fault == "none" else RATE_USED_AFTER_FAULT
    assert used.seconds >= 3 and used.share is not None and used.share >= bound, used
    if fault == "none":
        assert last_raised < HIGH + 2 * CONCURRENCY, last_raised
