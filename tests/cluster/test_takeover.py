"""Taking over fires a replica claimed but never started (SPEC §6: a killed
node delays no fire; its job's other replica fires it).

- The coordinator contract of ``start_fires`` / ``take_over_fires``, against
  the in-process coordinator and a real redis-server (one shard and two).
- The run row's compare-and-set behind it (``start_claimed_runs``), on
  SQLite and PostgreSQL.
- Two in-process nodes where one stalls between claiming and starting: the
  other sends those fires half a second late, and no fire goes out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.base import NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.errors import CoordinatorUnavailable
from cronman.models import RunFilter
from cronman.scheduler.claim.batch import take_over_batch
from cronman.scheduler.fires import Fire
from cronman.scheduler.node import SchedulerNode
from cronman.schedules import parse_schedule
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.timeutil import to_ms, utcnow
from tests.support.redis_servers import redis_servers
from tests.support.store_data import base_time, job_spec, make_run

TTL_MS = 60_000

# -- the coordinator contract ----------------------------------------------


@contextlib.contextmanager
def _coordinators(kind: str):
    """Two coordinator instances (nodes "a" and "b") over one lock table."""
    if kind == "memory":
        a = InProcessCoordinator(ttl=5.0)
        yield a, a.handle()
        return
    from cronman.coordination.redis import RedisCoordinator

    shards = 2 if kind == "redis-2-shards" else 1
    with redis_servers(shards) as servers:
        url = ",".join(s.url for s in servers)
        a = RedisCoordinator(Settings(redis_url=url, node_id="a"))
        b = RedisCoordinator(Settings(redis_url=url, node_id="b"))
        try:
            yield a, b
        finally:
            a.close()
            b.close()


COORDINATORS = ["memory", pytest.param("redis", marks=pytest.mark.redis),
                pytest.param("redis-2-shards", marks=pytest.mark.redis)]


@pytest.mark.counts_only
@pytest.mark.parametrize("kind", COORDINATORS)
def test_a_claimed_fire_is_started_by_its_holder_or_taken_over_never_both(kind):
    with _coordinators(kind) as (a, b):
        keys = [(f"job-{i}", 1_700_000_000_000 + i) for i in range(40)]
        assert a.claim_fires(keys, TTL_MS) == [True] * 40
        assert b.claim_fires(keys, TTL_MS) == [False] * 40  # b stands by
        # a starts the first half in time; b takes over what is left.
        assert a.start_fires(keys[:20], TTL_MS) == [True] * 20
        assert b.take_over_fires(keys, TTL_MS) == [False] * 20 + [True] * 20
        # a, late, finds the second half taken: it must not send them.
        assert a.start_fires(keys[20:], TTL_MS) == [False] * 20
        # Nothing changes hands twice; starting again is idempotent.
        assert b.take_over_fires(keys, TTL_MS) == [False] * 40
        assert a.take_over_fires(keys, TTL_MS) == [False] * 40
        assert a.start_fires(keys[:20], TTL_MS) == [True] * 20
        assert b.start_fires(keys[20:], TTL_MS) == [True] * 20
        # A started fire is still its holder's on a retried claim.
        assert a.claim_fires(keys[:1], TTL_MS) == [True]
        assert b.claim_fires(keys[20:21], TTL_MS) == [True]


@pytest.mark.counts_only
@pytest.mark.parametrize("kind", COORDINATORS)
def test_gone_locks_are_never_taken_and_the_row_owner_starts(kind):
    with _coordinators(kind) as (a, b):
        gone = [("job-x", 1_700_000_001_000)]
        # No lock (expired, Redis restarted): nothing says it was not started.
        assert b.take_over_fires(gone, TTL_MS) == [False]
        # The mark is made, and protects it; but the lock cannot vouch for
        # the caller (2): the node whose run row won starts it, by the row.
        assert a.start_fires(gone, TTL_MS) == [2]
        assert b.take_over_fires(gone, TTL_MS) == [False]
        assert a.start_fires(gone, TTL_MS) == [1]  # its own mark now
        # A lock held unstarted by a fence loser: likewise, the row decides.
        lost = [("job-y", 1_700_000_002_000)]
        assert b.claim_fires(lost, TTL_MS) == [True]
        assert a.start_fires(lost, TTL_MS) == [2]
        assert b.start_fires(lost, TTL_MS) == [False]
        # Nobody takes over its own claim.
        mine = [("job-z", 1_700_000_003_000)]
        assert a.claim_fires(mine, TTL_MS) == [True]
        assert a.take_over_fires(mine, TTL_MS) == [False]


@pytest.mark.counts_only
@pytest.mark.parametrize("kind", COORDINATORS)
def test_an_alive_holder_keeps_its_fires_and_a_second_owner_claims_what_nobody_did(kind):
    with _coordinators(kind) as (a, b):
        from cronman.coordination.base import ABSENT, HOLDER_ALIVE, NOT_TAKEN, TAKEN

        # Handles learn their node id when they join (Redis knows it already).
        a.join(NodeInfo(id="a"))
        b.join(NodeInfo(id="b"))
        late = [(f"job-{i}", 1_700_000_000_000 + i) for i in range(4)]
        assert a.claim_fires(late, TTL_MS) == [True] * 4
        # a is alive (pulsing, progressing): it is late, not gone.
        assert b.take_over_fires(late, TTL_MS, alive=["a"]) == [HOLDER_ALIVE] * 4
        assert a.start_fires(late[:2], TTL_MS) == [True] * 2
        # a stops pulsing: what it has not started is taken, nothing else.
        assert b.take_over_fires(late, TTL_MS, alive=[]) == [NOT_TAKEN] * 2 + [TAKEN] * 2
        assert a.start_fires(late[2:], TTL_MS) == [False] * 2
        # A fire without a lock: told, and nothing written (the run row decides).
        unclaimed = [("job-u", 1_700_000_009_000)]
        assert b.take_over_fires(unclaimed, TTL_MS, alive=["a"]) == [NOT_TAKEN]
        assert b.take_over_fires(unclaimed, TTL_MS, alive=["a"],
                                 report_absent=True) == [ABSENT]
        assert a.claim_fires(unclaimed, TTL_MS) == [True]


@pytest.mark.parametrize("kind", COORDINATORS)
def test_pulses_carry_the_coordinators_clock_and_expire(kind):
    with _coordinators(kind) as (a, b):
        before = to_ms(utcnow())
        first = a.pulse("a", "hello", 300, ["b"])
        assert first.pulses == {}
        assert abs(first.server_ms - before) < 5_000
        assert first.sent <= first.received
        seen = b.pulse("b", "there", 300, ["a"]).pulses["a"]
        assert (seen.node_id, seen.payload) == ("a", "hello")
        assert abs(seen.at_ms - first.server_ms) < 1_000
        time.sleep(0.4)
        assert "a" not in b.pulse("b", "there", 300, ["a"]).pulses


@pytest.mark.counts_only
def test_start_and_takeover_raise_when_the_coordinator_is_down():
    a = InProcessCoordinator(ttl=5.0)
    a.set_available(False)
    with pytest.raises(CoordinatorUnavailable):
        a.start_fires([("j", 1)], TTL_MS)
    with pytest.raises(CoordinatorUnavailable):
        a.take_over_fires([("j", 1)], TTL_MS)


@pytest.mark.counts_only
@pytest.mark.redis
def test_redis_takeover_and_start_race_from_threads():
    """Many holders' starts against many takeovers at the same moment: each
    fire is started by exactly one of them."""
    with _coordinators("redis") as (a, b):
        keys = [(f"race-{i}", 1_700_000_100_000 + i) for i in range(2000)]
        a.claim_fires(keys, TTL_MS)
        results: dict[str, list[bool]] = {}
        barrier = threading.Barrier(2)

        def run(name, fn):
            barrier.wait()
            got = []
            for i in range(0, len(keys), 50):
                got += fn(keys[i:i + 50], TTL_MS)
            results[name] = got

        threads = [threading.Thread(target=run, args=("start", a.start_fires)),
                   threading.Thread(target=run, args=("take", b.take_over_fires))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for started, taken in zip(results["start"], results["take"], strict=True):
            assert started != taken


# -- the run row's compare-and-set -----------------------------------------


@pytest.mark.counts_only
def test_start_claimed_runs_is_a_compare_and_set(store):
    (job,) = store.jobs.create_jobs([job_spec("cas-job")])
    t = base_time()
    runs = [make_run(job.id, t + timedelta(seconds=i), node="h") for i in range(4)]
    store.runs.claim_runs(runs)
    now = utcnow()
    lease = now + timedelta(seconds=30)
    # The holder starts its own claim (coordinator unreachable) ...
    first = [(runs[0].id, runs[0].scheduled_for)]
    assert store.runs.start_claimed_runs("h", first, now, lease, holder="h") == {runs[0].id}
    # ... a replica takes over the ones nobody started.
    keys = [(r.id, r.scheduled_for) for r in runs]
    assert store.runs.start_claimed_runs("w", keys, now, lease) == {r.id for r in runs[1:]}
    # The holder, late, finds them gone; nothing starts twice.
    assert store.runs.start_claimed_runs("h", keys, now, lease, holder="h") == set()
    assert store.runs.start_claimed_runs("w", keys, now, lease) == set()
    got = {r.id: store.runs.get_run(r.id) for r in runs}
    assert got[runs[0].id].node_id == "h" and got[runs[0].id].status == "running"
    assert all(got[r.id].node_id == "w" and got[r.id].started_at is not None
               for r in runs[1:])
    # A run not in the database is not touched (the taker inserts its own).
    ghost = make_run(job.id, t + timedelta(minutes=1))
    assert store.runs.start_claimed_runs("w", [(ghost.id, ghost.scheduled_for)], now,
                                         lease) == set()
    # A requested run (a trigger at a fire time whose lock a dead fence loser
    # holds) is its taker's: no takeover changes it; its taker starts it.
    trigger = make_run(job.id, t + timedelta(minutes=2), node="r", origin="trigger")
    store.runs.claim_runs([trigger])
    key = [(trigger.id, trigger.scheduled_for)]
    assert store.runs.start_claimed_runs("w", key, now, lease) == set()
    assert store.runs.start_claimed_runs("r", key, now, lease, holder="r") == {trigger.id}


@pytest.mark.counts_only
def test_a_takeover_marks_the_fires_whose_row_it_inserted_unstarted(store):
    """A fire taken from its holder's row is started in that row; one whose
    row the taker inserts (nobody had claimed it, or the holder never wrote
    one) is not started anywhere yet: it is marked at its due time like a
    claim (``TakeoverResult.unstarted``)."""
    (job,) = store.jobs.create_jobs([job_spec("mark-job")])
    t = base_time()
    fires = [Fire(job, to_ms(t + timedelta(seconds=i)), to_ms(t + timedelta(seconds=i)))
             for i in range(3)]
    coord = InProcessCoordinator(ttl=5.0)
    holder = coord.handle()
    # Fire 0: the holder claimed it (lock and row) and died before starting it.
    assert holder.claim_fires([(job.id, fires[0].fire_ms)], TTL_MS) == [True]
    store.runs.claim_runs([make_run(job.id, fires[0].scheduled_for, node="h")])
    # Fire 1: the holder won the lock but never wrote a row. Fire 2: nobody claimed it.
    assert holder.claim_fires([(job.id, fires[1].fire_ms)], TTL_MS) == [True]
    res = take_over_batch(fires, coordinator=coord.handle(), runs=store.runs, node_id="w",
                          now=utcnow, lease_seconds=30.0, claim_absent=True)
    assert [f.run_id for f in res.dispatch] == [f.run_id for f in fires]
    assert res.unstarted == {fires[1].run_id, fires[2].run_id}
    started = store.runs.get_run(fires[0].run_id)
    assert started.node_id == "w" and started.started_at is not None


# -- nodes: a stalled holder's fires are taken over -------------------------


class StallingStarts:
    """A coordinator handle whose fire starts hang for ``stall`` seconds: a
    node that stalls between its claims and their due time (or dies there)."""

    def __init__(self, inner: InProcessCoordinator, stall: float) -> None:
        self._inner = inner
        self.stall = stall
        self.stalled = 0

    def start_fires(self, keys, ttl_ms, **kwargs):
        self.stalled += len(keys)
        time.sleep(self.stall)
        return self._inner.start_fires(keys, ttl_ms, **kwargs)

    async def astart_fires(self, keys, ttl_ms, **kwargs):
        self.stalled += len(keys)
        await asyncio.sleep(self.stall)
        return self._inner.start_fires(keys, ttl_ms, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _run_nodes(nodes: list[SchedulerNode], seconds: float) -> None:
    """Run ``nodes`` in one event loop for ``seconds``, then stop them."""

    async def main():
        tasks = [asyncio.create_task(n.main()) for n in nodes]
        try:
            await asyncio.sleep(seconds)
        finally:
            for n in nodes:
                n.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)

    asyncio.run(main())


def _every_second_jobs(tmp_path, count: int = 10):
    """A migrated SQLite database with ``count`` jobs firing every second:
    (url, store, jobs)."""
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(db)
    store = open_store(db)
    jobs = store.jobs.create_jobs([job_spec(f"j{i}", schedule={"kind": "interval", "every": 1})
                                   for i in range(count)])
    return db, store, jobs


def _total(counter) -> float:
    """A counter's value summed over its labels."""
    return sum(s.value for m in counter.collect() for s in m.samples
               if s.name.endswith("_total"))


def _node(db, store, coordinator, node_id, target, **kwargs) -> SchedulerNode:
    settings = Settings(database_url=db, node_id=node_id, lease_seconds=10.0,
                        heartbeat_ttl=2.0, replicas=2)
    return SchedulerNode(settings, store, coordinator, TargetRegistry([target]),
                         registry=CollectorRegistry(), run_maintenance=False, **kwargs)


def test_a_stalled_holders_fires_go_out_from_the_replica_half_a_second_late(tmp_path):
    db, store, jobs = _every_second_jobs(tmp_path)
    coord = InProcessCoordinator(ttl=2.0)
    stalling = StallingStarts(coord, stall=1.5)
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = _node(db, store, stalling, "a", a_t)
    b = _node(db, open_store(db), coord.handle(), "b", b_t)

    _run_nodes([a, b], 4.5)
    sent = [(r.delivery.job_id, to_ms(r.delivery.scheduled_for), r.delivery.attempt)
            for t in (a_t, b_t) for r in t.records]
    keys = [(j, t) for j, t, _ in sent]
    assert len(keys) >= 20
    assert len(set(keys)) == len(keys), Counter(keys).most_common(3)
    assert stalling.stalled > 0 and _total(b.metrics.takeovers) > 0
    # What b took over went out once a's pulses said it stalled (STALL_MS, about
    # 1 s past due, a pulse or two more on a loaded machine), not a lease (10 s)
    # later.
    lateness = [r.lateness_ms for r in (store.runs.get_run(rec.delivery.run_id)
                                        for rec in b_t.records) if r and r.lateness_ms]
    assert lateness and max(lateness) < 3000, sorted(lateness)[-5:]
    runs = [r for j in jobs for r in store.runs.list_runs(j.id, RunFilter(), 1000, None).items]
    by_node = Counter(r.node_id for r in runs if (r.job_id, to_ms(r.scheduled_for)) in set(keys))
    assert by_node["b"] > 0
    store.close()


def test_a_busy_holder_that_starts_its_fires_late_is_not_taken_over(tmp_path):
    """a's start marks each take 0.7 s (a loaded coordinator, a busy loop):
    its fires start later than the takeover delay, but its pulses show it
    alive and its dispatch moving, so b leaves them to it."""
    db, store, jobs = _every_second_jobs(tmp_path)
    coord = InProcessCoordinator(ttl=2.0)
    slow = StallingStarts(coord, stall=0.7)
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = _node(db, store, slow, "a", a_t)
    b = _node(db, open_store(db), coord.handle(), "b", b_t)

    _run_nodes([a, b], 5.0)
    sent = [(r.delivery.job_id, to_ms(r.delivery.scheduled_for)) for t in (a_t, b_t)
            for r in t.records]
    assert len(sent) >= 20 and len(set(sent)) == len(sent), Counter(sent).most_common(3)
    assert slow.stalled > 0
    assert _total(a.metrics.takeovers) + _total(b.metrics.takeovers) == 0
    store.close()


class FenceOnlyClaims:
    """A coordinator handle whose fire claims fail while its other calls work
    (a node whose Redis connections break one by one as Redis comes back):
    it claims through the database fence alone."""

    def __init__(self, inner: InProcessCoordinator) -> None:
        self._inner = inner
        self.refused = 0

    def claim_fires(self, keys, ttl_ms, **kwargs):
        self.refused += len(keys)
        raise CoordinatorUnavailable("fire claims refused")

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_fire_claimed_through_the_fence_alone_is_marked_started_before_it_goes(tmp_path):
    """As Redis comes back, node a claims through the fence alone while a
    replica takes the same fires over by their locks (it found them held
    unstarted by an instance that is not alive, and took a's unstarted rows).
    a must mark each fire started before sending it -- and find it taken --
    rather than send it as well (a double fire, seen in the Redis outage test)."""
    db, store, jobs = _every_second_jobs(tmp_path)
    coord = InProcessCoordinator(ttl=2.0)
    now = utcnow()
    keys = []
    for job in jobs:
        schedule = parse_schedule(job.schedule, job_id=job.id, created_at=job.created_at)
        t = schedule.next_after(now)
        while t is not None and t < now + timedelta(seconds=6):
            keys.append((job.id, to_ms(t)))
            t = schedule.next_after(t)
    # The replica's takeover: every fire of the next seconds is started by it.
    replica = coord.handle()
    assert replica.claim_fires(keys, TTL_MS) == [True] * len(keys)
    assert replica.take_over_fires(keys, TTL_MS) == [False] * len(keys)  # its own
    assert replica.start_fires(keys, TTL_MS) == [True] * len(keys)
    fence_only = FenceOnlyClaims(coord.handle())
    a_t = RecordingTarget("http")
    a = _node(db, store, fence_only, "a", a_t, claim_lead=1.0)
    _run_nodes([a], 4.0)
    taken = {k for k in keys if k[1] < to_ms(utcnow()) - 1000}
    sent = {(r.delivery.job_id, to_ms(r.delivery.scheduled_for)) for r in a_t.records}
    assert fence_only.refused > 0 and len(taken) >= 20
    assert not sent & taken, sorted(sent & taken)[:3]
    assert _total(a.metrics.taken_over) >= len(taken)
    store.close()



# -- the sweeper spares live nodes' runs -----------------------------------


@pytest.mark.counts_only
def test_expired_runs_of_live_nodes_are_spared_for_a_while(store):
    """After a database outage longer than the lease, every run looks
    abandoned; the sweeper takes only those of nodes not in the membership
    (and a live node's only once they are long overdue)."""
    (job,) = store.jobs.create_jobs([job_spec("spare-job")])
    t = base_time()
    now = utcnow()
    dead = make_run(job.id, t, node="dead", lease_seconds=-5)
    live = make_run(job.id, t + timedelta(seconds=1), node="live", lease_seconds=-5)
    stale = make_run(job.id, t + timedelta(seconds=2), node="live", lease_seconds=-60)
    for r in (dead, live, stale):
        r.lease_expires_at = now + (r.lease_expires_at - r.claimed_at)
    store.runs.claim_runs([dead, live, stale])
    until = now + timedelta(seconds=30)
    taken = store.runs.take_expired_runs("sweeper", now, until, 10, spare=["live"],
                                         spare_before=now - timedelta(seconds=20))
    assert {r.id for r in taken} == {dead.id, stale.id}
    # Without the membership (no Redis), every expired run is taken.
    assert [r.id for r in store.runs.take_expired_runs("sweeper", now, until, 10)] == [live.id]


class SyncStuckAfterStart:
    """A node's store whose job sync stops learning anything once ``stuck``
    is set: its announcements never come and its polls hang (a node whose
    sync is stuck: it goes on firing the jobs it holds)."""

    def __init__(self, store) -> None:
        self._store = store
        self.stuck = threading.Event()
        self.released = threading.Event()
        outer = self

        class Jobs:
            def jobs_changed_since(self, *args, **kwargs):
                if outer.stuck.is_set():
                    outer.released.wait(30)
                return store.jobs.jobs_changed_since(*args, **kwargs)

            def live_job_rows(self, *args, **kwargs):
                if outer.stuck.is_set():
                    outer.released.wait(30)
                return store.jobs.live_job_rows(*args, **kwargs)

            def __getattr__(self, name):
                return getattr(store.jobs, name)

        self.jobs = Jobs()

    def feed(self):
        inner = self._store.feed()
        outer = self

        class Feed:
            def wait(self, timeout):
                ids = inner.wait(timeout)
                return [] if outer.stuck.is_set() else ids

            def close(self):
                inner.close()

        return Feed()

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_job_its_stuck_first_owner_never_heard_of_is_fired_by_the_second(tmp_path):
    """The first owner's sync is stuck when new jobs are made: it goes on
    pulsing, ready and in charge, firing the jobs it holds; the second owner
    asks the coordinator about the new jobs' fires it came through and
    claims what nobody did -- each fire once, about on time."""
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(db)
    store = open_store(db)
    stuck_store = SyncStuckAfterStart(store)
    coord = InProcessCoordinator(ttl=2.0)
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = _node(db, stuck_store, coord, "a", a_t)
    b = _node(db, open_store(db), coord.handle(), "b", b_t)
    created: list = []
    held_by_a: set[str] = set()

    async def main():
        tasks = [asyncio.create_task(n.main()) for n in (a, b)]
        try:
            await asyncio.sleep(1.5)
            stuck_store.stuck.set()
            await asyncio.sleep(0.3)  # a read of a's under way when it got stuck is done
            created.extend(await asyncio.to_thread(store.jobs.create_jobs, [
                job_spec(f"new{i}", schedule={"kind": "interval", "every": 1})
                for i in range(12)]))
            await asyncio.sleep(4.0)
            held_by_a.update(j.id for j in created if j.id in a.table.jobs)
        finally:
            stuck_store.released.set()  # a learns of them now, while it stops
            for n in (a, b):
                n.request_stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)

    asyncio.run(main())
    # Jobs whose first owner is the stuck node: only the second can fire them.
    theirs = {j.id for j in created if a.table.ownership.owners(j.id)[0] == "a"}
    assert theirs and not held_by_a
    got = [(r.delivery.job_id, to_ms(r.delivery.scheduled_for)) for t in (a_t, b_t)
           for r in t.records if r.delivery.job_id in theirs]
    assert len(got) == len(set(got)), Counter(got).most_common(3)
    for job_id in theirs:
        times = sorted(t for j, t in got if j == job_id)
        assert len(times) >= 3, (job_id, times)  # every second, from shortly after creation
    assert b.metrics.takeovers.labels("in_charge")._value.get() > 0
    store.close()
