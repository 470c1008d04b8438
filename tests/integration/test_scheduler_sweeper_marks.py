"""The lease sweeper and outcome marks: a run whose node died after learning its
outcome (but before writing it) is recorded, not sent again; with the
in-process coordinator and with real Redis.

The dead node is simulated by its leftovers: run rows it held whose lease
expired, and the marks it sent. A live node (SQLite store, recording target)
sweeps them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.memory import InProcessCoordinator
from cronman.coordination.redis import RedisCoordinator
from cronman.errors import CoordinatorUnavailable
from cronman.ids import run_id_for
from cronman.models import Run
from cronman.scheduler.node import SchedulerNode
from cronman.scheduler.record.outcome_marks import OutcomeMark
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.timeutil import format_rfc3339, to_ms, utcnow
from tests.support.store_data import job_spec

LEASE = 3.0


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    s = open_store(url)
    yield s
    s.close()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def coordinator(request) -> Iterator[InProcessCoordinator | RedisCoordinator]:
    if request.param == "memory":
        yield InProcessCoordinator(ttl=2.0)
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"cmt-{uuid.uuid4().hex[:10]}"
    coord = RedisCoordinator(Settings(redis_url=url, redis_key_prefix=prefix, node_id="n1",
                                      heartbeat_ttl=2.0))
    yield coord
    coord.close()
    raw = redis.Redis.from_url(url)
    for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
        raw.delete(key)
    raw.close()


def never(**overrides):
    """A job spec whose own schedule does not fire during a test."""
    at = format_rfc3339((utcnow() + timedelta(days=1)).replace(microsecond=0))
    return job_spec(f"job-{uuid.uuid4().hex[:8]}", schedule={"kind": "once", "at": at},
                    **overrides)


def dead_nodes_run(job_id: str, seconds_ago: int, attempt: int = 1) -> Run:
    """A run the dead node was sending: running, its lease expired."""
    now = utcnow()
    t = now.replace(microsecond=0) - timedelta(seconds=seconds_ago)
    return Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="running",
               attempt=attempt, node_id="dead", claimed_at=t, started_at=t, lateness_ms=2,
               lease_expires_at=now - timedelta(seconds=1))


def mark(run: Run, status: str, attempt: int = 1, **fields) -> tuple[str, int, str]:
    m = OutcomeMark(status=status, attempt=attempt, node_id="dead",
                    started_ms=to_ms(run.started_at), lateness_ms=2, **fields)
    return (run.id, attempt, m.encode())


def sweep(store, coordinator, target: RecordingTarget, until) -> SchedulerNode:
    """Run a node until ``until()`` holds (10 s at most); returns the node."""
    settings = Settings(node_id="n1", lease_seconds=LEASE, heartbeat_ttl=2.0, replicas=2)
    node = SchedulerNode(settings, store, coordinator, TargetRegistry([target]),
                         registry=CollectorRegistry(), run_maintenance=False)

    async def main():
        task = asyncio.create_task(node.main())
        deadline = time.monotonic() + 10
        try:
            while not until():
                assert time.monotonic() < deadline, "the sweeper did not get there in time"
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        finally:
            node.request_stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    return node


def test_the_sweeper_records_marked_outcomes_and_sends_only_the_rest(store, coordinator):
    dlq = {"kind": "http", "url": "http://127.0.0.1:9/dlq", "method": "POST", "headers": {},
           "body": "", "timeout": 5}
    alo, amo = store.jobs.create_jobs([never(dead_letter=dlq),
                                       never(delivery="at_most_once")])
    done = dead_nodes_run(alo.id, 20)
    failed = dead_nodes_run(alo.id, 19)
    retry = dead_nodes_run(alo.id, 18)
    plain = dead_nodes_run(alo.id, 17)
    replayed = dead_nodes_run(alo.id, 16, attempt=3)
    amo_done = dead_nodes_run(amo.id, 15)
    amo_plain = dead_nodes_run(amo.id, 14)
    amo_retry = dead_nodes_run(amo.id, 13)
    store.runs.claim_runs([done, failed, retry, plain, replayed, amo_done, amo_plain,
                           amo_retry])
    retry_at = to_ms(utcnow()) + 1500
    coordinator.mark_outcomes([
        mark(done, "succeeded", result={"http_status": 204}, finished_ms=to_ms(utcnow()),
             duration_ms=40),
        mark(failed, "failed", error="HTTP 500", result={"http_status": 500}),
        mark(retry, "retrying", error="HTTP 503", next_attempt_ms=retry_at),
        mark(replayed, "succeeded", attempt=2),  # an earlier incarnation's: ignored
        mark(amo_done, "succeeded"),
        mark(amo_retry, "retrying", error="HTTP 503", next_attempt_ms=to_ms(utcnow())),
    ], 60_000)
    target = RecordingTarget("http")
    rows = [done, failed, retry, plain, replayed, amo_done, amo_plain, amo_retry]

    def settled() -> bool:
        return (len(target.records) >= 5
                and all(store.runs.get_run(r.id).status in ("succeeded", "failed", "lost")
                        for r in rows))

    node = sweep(store, coordinator, target, settled)
    sent = {(r.delivery.run_id, r.delivery.attempt): r for r in target.records
            if not r.delivery.target["url"].endswith("/dlq")}
    assert sorted(sent) == sorted([(retry.id, 2), (plain.id, 2), (replayed.id, 4),
                                   (amo_retry.id, 2)])
    assert sent[(retry.id, 2)].wall * 1000 >= retry_at - 5  # after the marked backoff
    [dead_letter] = [r.delivery for r in target.records
                     if r.delivery.target["url"].endswith("/dlq")]
    assert failed.id in dead_letter.target["body"] and '"failed"' in dead_letter.target["body"]
    got = {r.id: store.runs.get_run(r.id) for r in rows}
    d = got[done.id]
    assert (d.status, d.attempt, d.result, d.duration_ms, d.node_id) == (
        "succeeded", 1, {"http_status": 204}, 40, "n1")
    assert (got[failed.id].status, got[failed.id].error) == ("failed", "HTTP 500")
    assert got[amo_done.id].status == "succeeded"
    assert got[amo_plain.id].status == "lost"
    assert (got[retry.id].status, got[retry.id].attempt) == ("succeeded", 2)
    assert (got[replayed.id].status, got[replayed.id].attempt) == ("succeeded", 4)
    assert node.metrics.recovered.labels("recorded")._value.get() == 3
    # The attempts this node made are marked in turn (should it die now).
    [text] = coordinator.read_outcomes([plain.id])
    again = OutcomeMark.decode(text)
    assert (again.status, again.attempt, again.node_id) == ("succeeded", 2, "n1")


def test_without_the_coordinator_the_sweeper_sends_again(store):
    coordinator = InProcessCoordinator(ttl=2.0)
    (job,) = store.jobs.create_jobs([never()])
    done = dead_nodes_run(job.id, 10)
    store.runs.claim_runs([done])
    coordinator.mark_outcomes([mark(done, "succeeded")], 60_000)
    handle = coordinator.handle()
    handle.set_available(False)
    target = RecordingTarget("http")
    sweep(store, handle, target,
          lambda: store.runs.get_run(done.id).status == "succeeded" and target.records)
    assert [(d.run_id, d.attempt) for d in target.deliveries] == [(done.id, 2)]


class SlowMarks(InProcessCoordinator):
    """Outcome marks as from a Redis the node is cut off from: none can be
    written, and a read answers only once ``answer`` is set (after the
    timeouts); ``asked`` holds the ids asked for."""

    def __init__(self) -> None:
        super().__init__(ttl=2.0)
        self.asked: list[str] = []
        self.reading = threading.Event()
        self.answer = threading.Event()

    def read_outcomes(self, run_ids):
        self.asked += run_ids
        self.reading.set()
        assert self.answer.wait(10), "the test never let the marks be read"
        return super().read_outcomes(run_ids)

    def mark_outcomes(self, marks, ttl_ms):
        raise CoordinatorUnavailable("cut off from the coordinator")


def test_an_own_run_that_ends_while_the_sweeper_reads_its_marks_is_not_sent_again(store):
    """This node's renewals lagged (its lease lapsed), its sweeper took its own
    run, then waited for the coordinator; meanwhile the attempt in flight
    ended here. The sweeper must not send it again (the chaos run's repeated
    attempts: a retry gone out from here, then re-sent under the same number)."""
    coordinator = SlowMarks()
    at = utcnow().replace(microsecond=0) + timedelta(seconds=2)
    (job,) = store.jobs.create_jobs([job_spec(f"job-{uuid.uuid4().hex[:8]}",
                                              schedule={"kind": "once",
                                                        "at": format_rfc3339(at)})])
    target = RecordingTarget("http", delay=1.5)
    settings = Settings(node_id="n1", lease_seconds=30.0, heartbeat_ttl=2.0, replicas=2)
    node = SchedulerNode(settings, store, coordinator, TargetRegistry([target]),
                         registry=CollectorRegistry(), run_maintenance=False)

    async def main() -> None:
        task = asyncio.create_task(node.main())
        try:
            [first] = await target.wait_for(1, timeout=15)
            run = store.runs.get_run(first.run_id)
            assert run is not None and node.dispatcher.holds(run.id)
            # The lease lapsed while its renewals were slow.
            assert store.runs.renew_leases("n1", [(run.id, run.scheduled_for)],
                                           utcnow() - timedelta(seconds=5)) == 1
            sweep = asyncio.create_task(node.sweeper.sweep_once())
            assert await asyncio.to_thread(coordinator.reading.wait, 10)
            assert run.id in coordinator.asked  # taken: its lease had lapsed
            deadline = time.monotonic() + 10
            # The attempt in flight ends here, its outcome written.
            while node.dispatcher.holds(run.id) or node.writer.has_pending_update(run.id):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            coordinator.answer.set()
            await sweep
            await asyncio.sleep(2.0)
        finally:
            coordinator.answer.set()
            node.request_stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    assert [(d.run_id, d.attempt) for d in target.deliveries] == [
        (target.deliveries[0].run_id, 1)]
    row = store.runs.get_run(target.deliveries[0].run_id)
    assert row is not None and (row.status, row.attempt) == ("succeeded", 1)


def test_the_attempt_a_swept_run_goes_out_as_is_in_its_row_before_it_is_sent(store, coordinator):
    """A node that took a run over records the attempt it sends before it
    sends it: should it be cut off right after (its outcome never written),
    the next sweeper sends the attempt after that one, not the same one again
    (the chaos run's repeated attempts after a partition)."""
    (job,) = store.jobs.create_jobs([never()])
    run = dead_nodes_run(job.id, 10)
    store.runs.claim_runs([run])
    target = RecordingTarget("http", delay=1.0)
    seen: list[int] = []

    def sent_and_checked() -> bool:
        if target.records and not seen:
            row = store.runs.get_run(run.id)
            assert row is not None
            seen.append(row.attempt)
        return bool(seen) and store.runs.get_run(run.id).status == "succeeded"

    sweep(store, coordinator, target, sent_and_checked)
    assert [(d.run_id, d.attempt) for d in target.deliveries] == [(run.id, 2)]
    assert seen == [2]  # in the row while the attempt was in flight
