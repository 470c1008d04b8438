"""Scheduler nodes in-process (SQLite store, in-process coordinator, recording
targets): exactly-once claims, and the failure rules of SPEC §6.

The database is made unreachable by a switch in front of the real store
(every call raises ``StoreUnavailable``), the coordinator by its own switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.base import TOO_EARLY
from cronman.coordination.memory import InProcessCoordinator
from cronman.errors import StoreUnavailable
from cronman.models import RunFilter, RunUpdate
from cronman.scheduler.claim.batch import claimed_run
from cronman.scheduler.fires import Fire
from cronman.scheduler.node import SchedulerNode
from cronman.scheduler.record import writer as writer_module
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.timeutil import to_ms, utcnow
from tests.support.store_data import job_spec


class Switch:
    down = False


class FlakyPart:
    """A store part whose calls fail while the switch is down."""

    def __init__(self, inner, switch: Switch) -> None:
        self._inner = inner
        self._switch = switch

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self._switch.down:
                raise StoreUnavailable("database down (test switch)")
            return attr(*args, **kwargs)

        return call


class FlakyStore:
    def __init__(self, store) -> None:
        self.inner = store
        self.switch = Switch()
        for part in ("jobs", "runs", "partitions", "tokens", "dependencies", "calendars",
                     "signing_keys", "work", "limits"):
            setattr(self, part, FlakyPart(getattr(store, part), self.switch))

    def feed(self):
        return self.inner.feed()

    def server_time_ms(self):
        if self.switch.down:
            raise StoreUnavailable("database down (test)")
        return self.inner.server_time_ms()

    @property
    def down(self) -> bool:
        return self.switch.down

    @down.setter
    def down(self, value: bool) -> None:
        self.switch.down = value


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    return url


@pytest.fixture
def store(db):
    s = open_store(db)
    yield s
    s.close()


def make_node(db, store, coordinator, node_id="n1", target=None, **kw) -> SchedulerNode:
    settings = Settings(database_url=db, node_id=node_id, lease_seconds=kw.pop("lease", 3.0),
                        heartbeat_ttl=2.0, replicas=2,
                        max_in_flight=kw.pop("max_in_flight", 100))
    target = target or RecordingTarget("http")
    return SchedulerNode(settings, store, coordinator, TargetRegistry([target]),
                         registry=CollectorRegistry(), run_maintenance=False, **kw)


@contextlib.asynccontextmanager
async def running(*nodes: SchedulerNode):
    tasks = [asyncio.create_task(n.main()) for n in nodes]
    deadline = time.monotonic() + 10
    while not all(n.ready.is_set() for n in nodes):
        for t in tasks:
            if t.done():
                t.result()
        assert time.monotonic() < deadline, "nodes not ready"
        await asyncio.sleep(0.02)
    try:
        yield
    finally:
        for n in nodes:
            n.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)


def every_second(n: int, **kw):
    return [job_spec(f"job-{i}", schedule={"kind": "interval", "every": 1}, **kw)
            for i in range(n)]


def fire_keys(*targets: RecordingTarget) -> list[tuple[str, int]]:
    return [(r.delivery.job_id, to_ms(r.delivery.scheduled_for))
            for t in targets for r in t.records]


def all_runs(store, jobs):
    return [r for j in jobs for r in store.runs.list_runs(j.id, RunFilter(), 1000, None).items]


def test_two_replicas_fire_each_time_once(db, store):
    jobs = store.jobs.create_jobs(every_second(10))
    coord = InProcessCoordinator(ttl=2.0)
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = make_node(db, store, coord, "a", a_t)
    b = make_node(db, open_store(db), coord.handle(), "b", b_t)

    def losses() -> int:
        return a.claimer.lock_losses + b.claimer.lock_losses

    warm: dict[str, int] = {}

    async def main():
        async with running(a, b):
            await asyncio.sleep(2.0)
            warm["losses"], warm["fires"] = losses(), len(fire_keys(a_t, b_t))
            await asyncio.sleep(2.3)

    asyncio.run(main())
    keys = fire_keys(a_t, b_t)
    assert len(keys) >= 30
    assert len(set(keys)) == len(keys), Counter(keys).most_common(3)
    # Each job's first owner claims its fires; the second only watches them.
    # Until both have read each other's pulses the replicas race (how many
    # seconds that takes depends on the machine's load); after that a race
    # is the exception (a pulse read late), never every fire.
    assert a_t.records and b_t.records
    late_fires = len(keys) - warm["fires"]
    assert late_fires >= 10
    assert losses() - warm["losses"] <= late_fires // 2, (warm, losses(), late_fires)
    takeovers = [s.value for n in (a, b) for m in n.metrics.takeovers.collect()
                 for s in m.samples if s.name.endswith("_total")]
    assert sum(takeovers) == 0
    runs = all_runs(store, jobs)
    assert sorted((r.job_id, to_ms(r.scheduled_for)) for r in runs) == sorted(keys)
    assert {r.status for r in runs} <= {"succeeded", "claimed", "running"}


def test_coordinator_down_the_database_fence_alone_keeps_fires_unique(db, store):
    store.jobs.create_jobs(every_second(5))
    coord = InProcessCoordinator(ttl=2.0)
    other = coord.handle()
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = make_node(db, store, coord, "a", a_t)
    b = make_node(db, open_store(db), other, "b", b_t)

    async def main():
        async with running(a, b):
            coord.set_available(False)
            other.set_available(False)
            await asyncio.sleep(3.2)

    asyncio.run(main())
    keys = fire_keys(a_t, b_t)
    assert len(keys) >= 10
    assert len(set(keys)) == len(keys)
    assert a.metrics.coordinator_errors.labels("claim")._value.get() > 0


def test_database_down_fires_continue_and_rows_are_written_later(db, store):
    jobs = store.jobs.create_jobs(every_second(3))
    flaky = FlakyStore(store)
    target = RecordingTarget("http")
    node = make_node(db, flaky, InProcessCoordinator(ttl=2.0), "a", target)

    async def main():
        async with running(node):
            await asyncio.sleep(1.2)
            flaky.down = True
            before = len(target.records)
            await asyncio.sleep(2.5)
            during = len(target.records) - before
            flaky.down = False
            await asyncio.sleep(1.5)
            return during

    during = asyncio.run(main())
    assert during >= 6  # 3 jobs x ~2.5 s, dispatched under the coordinator lock alone
    keys = fire_keys(target)
    assert len(set(keys)) == len(keys)
    runs = all_runs(store, jobs)
    # Every dispatched fire has its row, with its outcome.
    assert sorted(keys) == sorted((r.job_id, to_ms(r.scheduled_for)) for r in runs
                                  if (r.job_id, to_ms(r.scheduled_for)) in set(keys))
    done = [r for r in runs if r.status == "succeeded"]
    assert len(done) >= len(keys) - 3
    assert node.metrics.double_fires._value.get() == 0
    assert node.metrics.store_errors.labels("claim")._value.get() > 0


def test_a_fire_dispatched_twice_during_an_outage_is_detected(db, store):
    jobs = store.jobs.create_jobs(every_second(2))
    coord = InProcessCoordinator(ttl=2.0)
    b_coord = coord.handle()
    flaky = FlakyStore(store)
    a_t, b_t = RecordingTarget("http"), RecordingTarget("http")
    a = make_node(db, flaky, coord, "a", a_t)
    b = make_node(db, open_store(db), b_coord, "b", b_t)

    async def main():
        async with running(a, b):
            # a: database down, lock won -> dispatches; b: coordinator down,
            # fence won -> dispatches too. A real double fire.
            flaky.down = True
            b_coord.set_available(False)
            await asyncio.sleep(2.2)
            flaky.down = False
            b_coord.set_available(True)
            await asyncio.sleep(1.0)

    asyncio.run(main())
    both = set(fire_keys(a_t)) & set(fire_keys(b_t))
    assert both
    assert a.metrics.double_fires._value.get() >= len(both) - 2
    assert a.metrics.double_fires._value.get() > 0
    # The fence kept one row per fire time; b's record stands.
    runs = all_runs(store, jobs)
    keys = [(r.job_id, to_ms(r.scheduled_for)) for r in runs]
    assert len(set(keys)) == len(keys)
    assert {r.node_id for r in runs if (r.job_id, to_ms(r.scheduled_for)) in both} == {"b"}


def test_a_takeover_written_late_takes_only_a_row_its_holder_never_started(db, store):
    # Node a took over two fires of b while its database was down; b started
    # one of them (through its row: its coordinator was down) and not the other.
    [job] = store.jobs.create_jobs(every_second(1))
    now = utcnow().replace(microsecond=0)
    lease_until = now + timedelta(seconds=30)
    fires = [Fire(job, to_ms(now) + k * 1000, to_ms(now) + k * 1000) for k in (1, 2)]
    store.runs.claim_runs([claimed_run(f, "b", now, lease_until) for f in fires])
    started, unstarted = fires
    assert store.runs.start_claimed_runs("b", [(started.run_id, started.scheduled_for)], now,
                                         lease_until, "b") == {started.run_id}
    metrics = NodeMetrics(CollectorRegistry())
    with ThreadPoolExecutor(1) as pool:
        writer = ResultWriter(store.runs, pool, metrics, node_id="a", clock=ReferenceClock())
        writer.insert_later([claimed_run(f, "a", now, lease_until) for f in fires], [],
                            takeover=True)
        for f in fires:
            writer.update(RunUpdate(id=f.run_id, scheduled_for=f.scheduled_for,
                                    status="succeeded", started_at=now, finished_at=now))
        assert asyncio.run(writer.flush())
    rows = {r.id: r for r in all_runs(store, [job])}
    assert (rows[started.run_id].node_id, rows[started.run_id].status) == ("b", "running")
    assert (rows[unstarted.run_id].node_id, rows[unstarted.run_id].status) == ("a", "succeeded")
    assert metrics.double_fires._value.get() == 1


def test_both_down_nothing_is_dispatched_and_the_gap_is_recorded(db, store, monkeypatch):
    monkeypatch.setattr(writer_module, "UNREACHABLE_WRITE_DELAY", 0.3)
    jobs = store.jobs.create_jobs(every_second(2))
    flaky = FlakyStore(store)
    coord = InProcessCoordinator(ttl=2.0)
    target = RecordingTarget("http")
    node = make_node(db, flaky, coord, "a", target)

    async def main():
        async with running(node):
            await asyncio.sleep(1.1)
            flaky.down = True
            coord.set_available(False)
            outage = (utcnow(), len(target.records))
            await asyncio.sleep(2.2)
            delivered = len(target.records) - outage[1]
            flaky.down = False
            coord.set_available(True)
            await asyncio.sleep(1.5)
            return outage[0], delivered

    began, delivered = asyncio.run(main())
    # At most what was claimed just before the outage began.
    assert delivered <= 2
    runs = all_runs(store, jobs)
    skipped = [r for r in runs if r.status == "skipped"]
    assert len(skipped) >= 2
    assert all("could reach neither the database" in r.error for r in skipped)
    assert all(r.scheduled_for > began for r in skipped)
    assert node.metrics.not_dispatched._value.get() == len(skipped)


def record_retries(node: SchedulerNode) -> list[RunUpdate]:
    """The ``retrying`` updates ``node`` writes, in order, as they were handed
    to its writer (each the failure's handling time plus the lease as
    ``lease_expires_at``, and the next attempt's time as ``next_attempt_at``)."""
    seen: list[RunUpdate] = []
    update = node.writer.update

    def recording(u: RunUpdate) -> None:
        if u.status == "retrying":
            seen.append(copy.copy(u))  # the writer merges later ones into a queued one
        update(u)

    node.writer.update = recording  # type: ignore[method-assign]
    return seen


def test_retries_follow_the_backoff_then_fail(db, store):
    at = (utcnow() + timedelta(seconds=1)).replace(microsecond=0)
    from cronman.callbacks.base import Outcome
    from cronman.timeutil import format_rfc3339

    [job] = store.jobs.create_jobs([job_spec("r", schedule={"kind": "once",
                                                           "at": format_rfc3339(at)},
                                             retry={"max_attempts": 4, "min_backoff": 0.2,
                                                    "max_backoff": 0.3})])
    target = RecordingTarget("http", outcome=Outcome(False, {"http_status": 503},
                                                     error="HTTP 503"))
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target)
    retrying = record_retries(node)

    async def main():
        async with running(node):
            await target.wait_for(4, timeout=5)
            await asyncio.sleep(0.5)

    asyncio.run(main())
    # The waits the node set, from each failure to the next attempt's time (on
    # its own clock: a loaded machine runs them late, it does not change them).
    lease = timedelta(seconds=node.settings.lease_seconds)
    waits = [u.next_attempt_at - (u.lease_expires_at - lease) for u in retrying]
    assert waits == [timedelta(seconds=s) for s in (0.2, 0.3, 0.3)]  # 0.2, 0.4 capped at 0.3
    # Each attempt is sent at its time, not before, and at least that wait after the last.
    for u, rec in zip(retrying, target.records[1:], strict=True):
        assert rec.wall * 1000 >= node.clock.local_ms(to_ms(u.next_attempt_at)) - 1
    times = [r.at for r in target.records]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert all(g >= w.total_seconds() - 0.002 for g, w in zip(gaps, waits, strict=True)), gaps
    assert [d.attempt for d in target.deliveries] == [1, 2, 3, 4]
    assert len(set(target.run_ids())) == 1
    [run] = all_runs(store, [job])
    assert run.status == "failed" and run.attempt == 4 and run.error == "HTTP 503"
    assert run.result == {"http_status": 503}


def test_a_refused_target_fails_at_once_without_retries(db, store):
    from cronman.callbacks.base import Outcome

    [job] = store.jobs.create_jobs([job_spec("r", schedule={"kind": "interval", "every": 1},
                                             retry={"max_attempts": 5, "min_backoff": 0.1,
                                                    "max_backoff": 1})])
    target = RecordingTarget("http", outcome=Outcome(False, error="private address refused",
                                                     retryable=False))
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target)

    async def main():
        async with running(node):
            await target.wait_for(1, timeout=3)
            await asyncio.sleep(0.6)

    asyncio.run(main())
    runs = [r for r in all_runs(store, [job]) if r.status == "failed"]
    assert runs and all(r.attempt == 1 for r in runs)
    assert Counter(target.run_ids()).most_common(1)[0][1] == 1


class StartRaises(RecordingTarget):
    """A target whose synchronous start (``Target.start``) raises: a bug in it."""

    def __init__(self) -> None:
        super().__init__("http")
        self.starts = 0

    def start(self, delivery):
        self.starts += 1
        raise RuntimeError("boom")


def test_a_target_whose_start_raises_fails_the_run_and_the_node_goes_on(db, store):
    [job] = store.jobs.create_jobs([job_spec("s", schedule={"kind": "interval", "every": 1},
                                             retry={"max_attempts": 1})])
    target = StartRaises()
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target)

    async def main():
        async with running(node):
            deadline = time.monotonic() + 5
            while target.starts < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.6)

    asyncio.run(main())
    assert target.starts >= 2 and not target.records
    failed = [r for r in all_runs(store, [job]) if r.status == "failed"]
    assert len(failed) >= 2
    assert all(r.error == "target error: RuntimeError('boom')" for r in failed)


def test_saturated_dispatch_starts_higher_priority_first(db, store):
    at = (utcnow() + timedelta(seconds=1.5)).replace(microsecond=0)
    from cronman.timeutil import format_rfc3339

    blocker_at = format_rfc3339(at - timedelta(milliseconds=300))
    specs = [job_spec("blocker", schedule={"kind": "once", "at": blocker_at})]
    specs += [job_spec(f"p{p}", priority=p, schedule={"kind": "once", "at": format_rfc3339(at)})
              for p in (0, 9, 5)]
    store.jobs.create_jobs(specs)
    target = RecordingTarget("http", delay=0.5)
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target, max_in_flight=1)

    async def main():
        async with running(node):
            await target.wait_for(4, timeout=6)

    asyncio.run(main())
    names = {j.id: j.name for j in store.jobs.iter_live_jobs().__next__()}
    assert [names[d.job_id] for d in target.deliveries] == ["blocker", "p9", "p5", "p0"]
    assert target.max_in_flight == 1


def test_saturated_dispatch_lets_namespaces_take_turns(db, store):
    """A herd of one namespace due at once does not hold back another
    namespace's fires of the same priority: they alternate."""
    at = (utcnow() + timedelta(seconds=1.5)).replace(microsecond=0)
    from cronman.timeutil import format_rfc3339

    once = {"kind": "once", "at": format_rfc3339(at)}
    blocker = {"kind": "once", "at": format_rfc3339(at - timedelta(milliseconds=300))}
    specs = [job_spec("blocker", schedule=blocker)]
    specs += [job_spec(f"herd-{i}", namespace="herd", schedule=once) for i in range(12)]
    specs += [job_spec(f"other-{i}", namespace="other", schedule=once) for i in range(3)]
    store.jobs.create_jobs(specs)
    target = RecordingTarget("http", delay=0.05)
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target, max_in_flight=1)

    async def main():
        async with running(node):
            await target.wait_for(16, timeout=8)

    asyncio.run(main())
    names = {j.id: j.name for j in store.jobs.iter_live_jobs().__next__()}
    order = [names[d.job_id] for d in target.deliveries]
    others = [i for i, n in enumerate(order) if n.startswith("other-")]
    # blocker first; then every other-* within the first two turns of each.
    assert order[0] == "blocker" and len(others) == 3
    assert max(others) <= 1 + 2 * 3, order


def test_a_hung_target_does_not_delay_other_fires(db, store):
    store.jobs.create_jobs([
        job_spec("hung", schedule={"kind": "interval", "every": 1},
                 target={"kind": "http", "url": "http://127.0.0.1:9/hung", "method": "POST",
                         "headers": {}, "body": "", "timeout": 1}),
        job_spec("ok", schedule={"kind": "interval", "every": 1}),
    ])
    target = RecordingTarget("http", delay=lambda d: 60 if d.target["url"].endswith("/hung")
                             else 0)
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target)
    ready_at = 0.0

    async def main():
        nonlocal ready_at
        async with running(node):
            ready_at = time.time()
            await asyncio.sleep(3.5)

    asyncio.run(main())
    # Fires due while the node started are delivered late (within grace, as
    # usual); look at those due once it ran.
    ok = [r for r in target.records if not r.delivery.target["url"].endswith("/hung")
          and r.delivery.scheduled_for.timestamp() >= ready_at]
    assert len(ok) >= 3
    # A target that hangs only holds its own slot: the others stay on time.
    assert all(r.wall - r.delivery.scheduled_for.timestamp() < 0.3 for r in ok)


def test_graceful_stop_hands_back_runs_that_a_new_node_redispatches(db, store):
    at = (utcnow() + timedelta(seconds=1)).replace(microsecond=0)
    from cronman.timeutil import format_rfc3339

    [job] = store.jobs.create_jobs([job_spec("slow", schedule={"kind": "once",
                                                              "at": format_rfc3339(at)})])
    slow = RecordingTarget("http", delay=60)
    first = make_node(db, store, InProcessCoordinator(ttl=2.0), "first", slow)
    fast = RecordingTarget("http")
    second = make_node(db, store, InProcessCoordinator(ttl=2.0), "second", fast,
                       sweep_interval=0.2)

    async def main():
        async with running(first):
            await slow.wait_for(1, timeout=5)
            stop_began = time.monotonic()
        took = time.monotonic() - stop_began
        [run] = all_runs(store, [job])
        assert run.status in ("claimed", "running")
        assert run.lease_expires_at <= utcnow()
        async with running(second):
            await fast.wait_for(1, timeout=5)
            await asyncio.sleep(0.5)
        return took

    took = asyncio.run(main())
    assert took < 7.0
    [d] = fast.deliveries
    assert d.attempt == 2 and d.run_id == slow.deliveries[0].run_id
    [run] = all_runs(store, [job])
    assert run.status == "succeeded" and run.node_id == "second" and run.attempt == 2


def test_a_claimed_fire_of_a_job_deleted_before_its_time_is_skipped(db, store):
    at = (utcnow() + timedelta(seconds=2)).replace(microsecond=0)
    from cronman.timeutil import format_rfc3339

    [job] = store.jobs.create_jobs([job_spec("del", schedule={"kind": "once",
                                                             "at": format_rfc3339(at)})])
    target = RecordingTarget("http")
    node = make_node(db, store, InProcessCoordinator(ttl=2.0), "a", target, claim_lead=1.8)

    async def main():
        async with running(node):
            deadline = time.monotonic() + 3
            while not all_runs(store, [job]) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert all_runs(store, [job]), "not claimed ahead"
            store.jobs.delete_job(job.id)
            await asyncio.sleep(2.5)

    asyncio.run(main())
    assert target.records == []
    [run] = all_runs(store, [job])
    assert run.status == "skipped" and run.error == "job deleted before the run started"


def test_free_heap_can_be_handed_back_to_the_os():
    """glibc here: the trim after a big load is available and harmless."""
    from cronman.scheduler.runtime.heap_trim import release_free_memory

    junk = [bytes(4096) for _ in range(10_000)]
    del junk
    assert release_free_memory() is True


class EarlyEverywhere(InProcessCoordinator):
    """A coordinator whose clock runs behind this host's: every claim is
    refused as too early (the node's clock runs fast by its reckoning)."""

    def claim_fires(self, keys, ttl_ms, *, max_ahead_ms=None):
        self._check()
        return [TOO_EARLY] * len(keys)


def test_a_claim_refused_as_too_early_is_fired_late_never_lost(db, store):
    """SPEC §6: a node whose claims are refused as too early, with no other
    owner to fire them, claims the fires after their due time: each fire once,
    none before its time, none lost."""
    jobs = store.jobs.create_jobs(every_second(5))
    target = RecordingTarget("http")
    node = make_node(db, store, EarlyEverywhere(ttl=2.0), "a", target)

    async def main():
        async with running(node):
            await asyncio.sleep(3.5)

    asyncio.run(main())
    keys = fire_keys(target)
    assert len(keys) >= 10 and len(set(keys)) == len(keys)
    assert all(r.wall * 1000 >= to_ms(r.delivery.scheduled_for) for r in target.records)
    assert node.metrics.early_claims._value.get() >= len(keys)
    assert node.metrics.takeovers.labels("early")._value.get() >= len(keys)
    runs = all_runs(store, jobs)
    assert sorted((r.job_id, to_ms(r.scheduled_for)) for r in runs) == sorted(keys)


class SlowClaims(InProcessCoordinator):
    """Every claim batch takes a second: the node falls behind its fires."""

    def claim_fires(self, keys, ttl_ms, *, max_ahead_ms=None):
        time.sleep(1.0)
        return super().claim_fires(keys, ttl_ms, max_ahead_ms=max_ahead_ms)


def test_a_node_behind_claims_raised_priorities_ahead_and_fires_them_on_time(db, store):
    # Each batch takes 1 s to claim, so a default-priority fire is claimed up
    # to about 1.5 s late; jobs above the default priority are claimed twice
    # the recent batches' time further ahead, and leave on time.
    store.jobs.create_jobs(every_second(20) + [
        job_spec(f"high-{i}", schedule={"kind": "interval", "every": 1}, priority=10)
        for i in range(3)])
    target = RecordingTarget("http")
    node = make_node(db, store, SlowClaims(ttl=2.0), "n1", target)

    async def main():
        async with running(node):
            await asyncio.sleep(7.0)

    asyncio.run(main())
    first = min(r.delivery.scheduled_for.timestamp() for r in target.records)
    late: dict[bool, list[float]] = {True: [], False: []}
    for r in target.records:
        due = r.delivery.scheduled_for.timestamp()
        if due >= first + 3:  # the first batches go before the node knows claims are slow
            late[r.delivery.priority > 0].append(r.wall - due)
    assert node.claimer.extra_lead_ms > 0
    assert len(late[True]) >= 6
    # The lead is twice the longest recent claim round: only a round more
    # than twice as slow as those before it makes a raised fire late.
    assert statistics.median(late[True]) < 0.05 and max(late[True]) < 0.6, late[True]
    assert statistics.median(late[False]) > 0.4  # the default priority waits for its claims
