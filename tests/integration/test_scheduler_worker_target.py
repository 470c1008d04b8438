"""A scheduler node in-process (SQLite, in-process coordinator) with worker
targets: runs go to their queue and the node forgets them; the queue's
expiry runs on the node; ``forbid`` and ``replace`` see runs in a queue."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.memory import InProcessCoordinator
from cronman.models import RunFilter
from cronman.scheduler.node import SchedulerNode
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.timeutil import utcnow
from tests.support.store_data import job_spec

WORKER = {"kind": "worker", "queue": "batch", "payload": {"x": 1}, "heartbeat_timeout": 1,
          "timeout": 3600, "capacity": None}


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


def _node(db, store, http: RecordingTarget | None = None) -> SchedulerNode:
    settings = Settings(database_url=db, node_id="n1", lease_seconds=3.0, heartbeat_ttl=2.0,
                        replicas=1)
    return SchedulerNode(settings, store, InProcessCoordinator(ttl=2.0),
                         TargetRegistry([http or RecordingTarget("http")]),
                         registry=CollectorRegistry(), run_maintenance=False)


@contextlib.asynccontextmanager
async def running(node: SchedulerNode):
    task = asyncio.create_task(node.main())
    deadline = time.monotonic() + 10
    while not node.ready.is_set():
        if task.done():
            task.result()
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    try:
        yield
    finally:
        node.request_stop()
        await asyncio.wait_for(task, 15)


def _runs(store, job):
    return store.runs.list_runs(job.id, RunFilter(), 100, None).items


def test_fires_go_to_the_queue_and_a_lapsed_lease_comes_back(db, store):
    (job,) = store.jobs.create_jobs([job_spec(
        "to-queue", schedule={"kind": "interval", "every": 3600,
                              "anchor": (utcnow() + timedelta(seconds=1)).isoformat()},
        target=WORKER, retry={"max_attempts": 2, "min_backoff": 1, "max_backoff": 1})])
    node = _node(db, store)

    async def main():
        async with running(node):
            claim = None
            for _ in range(100):
                claim = await asyncio.to_thread(store.work.claim, "default", "batch", "w1",
                                                slots=1, now=utcnow())
                if claim is not None:
                    break
                await asyncio.sleep(0.05)
            assert claim is not None
            assert claim.item.payload == {"x": 1}
            assert not node.dispatcher.active  # the node forgot it
            # No heartbeat: the node's expiry re-queues it as attempt 2.
            again = None
            for _ in range(100):
                await asyncio.sleep(0.1)
                again = await asyncio.to_thread(store.work.claim, "default", "batch", "w2",
                                                slots=1, now=utcnow())
                if again is not None:
                    break
            assert again is not None and again.item.attempt == 2
            await asyncio.to_thread(store.work.complete, again.run.id, again.lease_token,
                                    status="succeeded", result={"ok": True}, error=None,
                                    now=utcnow())
            return claim.run.id

    run_id = asyncio.run(main())
    (run,) = _runs(store, job)
    assert run.id == run_id
    assert (run.status, run.attempt, run.result) == ("succeeded", 2,
                                                       {"ok": True, "worker_id": "w2"})


def run_for(node: SchedulerNode, seconds: float) -> None:
    """Run the node (ready first) for ``seconds``, then stop it."""

    async def main() -> None:
        async with running(node):
            await asyncio.sleep(seconds)

    asyncio.run(main())


@pytest.mark.parametrize("policy", ["forbid", "replace"])
def test_concurrency_sees_a_run_still_in_its_queue(db, store, policy):
    (job,) = store.jobs.create_jobs([job_spec(
        f"long-{policy}", schedule={"kind": "interval", "every": 1},
        target={**WORKER, "heartbeat_timeout": 600}, concurrency=policy)])
    node = _node(db, store)

    run_for(node, 3.5)
    runs = sorted(_runs(store, job), key=lambda r: r.scheduled_for)
    assert len(runs) >= 3
    items = store.work.items([r.id for r in runs], now=utcnow())
    if policy == "forbid":
        # The first stays in its queue; the later fires were skipped.
        assert list(items) == [runs[0].id]
        assert {r.status for r in runs[1:]} == {"skipped"}
        assert all("still in flight" in (r.error or "") for r in runs[1:])
    else:
        # Each fire cancelled the queued one before it: only the last is queued.
        assert list(items) == [runs[-1].id]
        assert all(r.status == "failed" and r.error.startswith("cancelled: replaced by run")
                   for r in runs[:-1]), [(r.status, r.error) for r in runs]


def test_a_run_an_upstream_made_sees_its_jobs_run_still_in_its_queue(db, store):
    # Runs made by an upstream's success come through the requested runs, not
    # the claim: their job's concurrency policy weighs the queued run all the same.
    (up,) = store.jobs.create_jobs([job_spec("up", schedule={"kind": "interval", "every": 1},
                                             target={"kind": "http",
                                                     "url": "http://127.0.0.1:9/up"})])
    (down,) = store.jobs.create_jobs([job_spec(
        "down", schedule={"kind": "after", "jobs": [up.id]},
        target={**WORKER, "heartbeat_timeout": 600}, concurrency="forbid")])
    node = _node(db, store)

    run_for(node, 3.5)
    runs = sorted(_runs(store, down), key=lambda r: r.scheduled_for)
    assert {r.origin for r in runs} == {"upstream"}
    assert list(store.work.items([r.id for r in runs], now=utcnow())) == [runs[0].id]
    decided = [r for r in runs[1:] if r.status not in ("claimed", "requested")]  # at the stop
    assert len(decided) >= 1, [(r.status, r.error) for r in runs]
    assert all(r.status == "skipped" and "still in flight" in (r.error or "")
               for r in decided), [(r.status, r.error) for r in runs]


def test_a_run_failed_through_its_queue_goes_to_the_dead_letter(db, store):
    (job,) = store.jobs.create_jobs([job_spec(
        "with-dlq", schedule={"kind": "interval", "every": 3600,
                              "anchor": (utcnow() + timedelta(seconds=1)).isoformat()},
        target=WORKER, retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1},
        dead_letter={"kind": "http", "url": "http://127.0.0.1:9/dlq", "method": "POST",
                     "headers": {}, "body": "", "timeout": 5})])
    http = RecordingTarget("http")
    node = _node(db, store, http)

    async def main():
        async with running(node):
            claim = None
            for _ in range(100):
                claim = await asyncio.to_thread(store.work.claim, "default", "batch", "w1",
                                                slots=1, now=utcnow())
                if claim is not None:
                    break
                await asyncio.sleep(0.05)
            assert claim is not None
            await asyncio.to_thread(store.work.complete, claim.run.id, claim.lease_token,
                                    status="failed", result=None, error="exit 2",
                                    now=utcnow())
            for _ in range(50):
                if http.records:
                    break
                await asyncio.sleep(0.1)
            return claim.run.id

    run_id = asyncio.run(main())
    (sent,) = http.records
    assert sent.delivery.target["url"] == "http://127.0.0.1:9/dlq"
    assert run_id in sent.delivery.target["body"] and "exit 2" in sent.delivery.target["body"]
    (run,) = _runs(store, job)
    assert (run.status, run.error) == ("failed", "exit 2")
    assert store.work.take_ended() == []  # sent once


def test_the_worker_target_hands_over_only_a_row_its_node_holds(store):
    from cronman.callbacks.base import Delivery
    from cronman.callbacks.worker import WorkerTarget
    from cronman.ids import run_id_for
    from cronman.models import Run
    from cronman.timeutil import to_ms

    (job,) = store.jobs.create_jobs([job_spec("hand-over", target={
        **WORKER, "capacity": {"idle_workers": 3, "wait": 60}}, priority=4)])
    t = utcnow().replace(microsecond=0)
    run = Run(id=run_id_for(job.id, t), job_id=job.id, scheduled_for=t, status="running",
              attempt=1, node_id="n1", claimed_at=t)
    store.runs.claim_runs([run])
    delivery = Delivery(job_id=job.id, run_id=run.id, scheduled_for=t, attempt=1,
                        target=job.target, namespace=job.namespace, job_name=job.name,
                        priority=job.priority, retry=job.retry, delivery_mode="at_most_once",
                        due_ms=to_ms(t))

    async def deliver(node_id):
        target = WorkerTarget(store.work, node_id)
        try:
            return await target.deliver(delivery)
        finally:
            await target.close()

    refused = asyncio.run(deliver("n2"))
    assert not refused.ok and not refused.handed_off and "not this node's" in refused.error
    taken = asyncio.run(deliver("n1"))
    assert taken.ok and taken.handed_off and taken.result == {"queue": "batch"}
    item = store.work.items([run.id], now=utcnow())[run.id]
    assert (item.queue, item.priority, item.capacity_idle, item.capacity_wait) == (
        "batch", 4, 3, 60)
    assert item.payload == {"x": 1} and item.due_at == t
    assert store.runs.get_run(run.id).node_id is None
