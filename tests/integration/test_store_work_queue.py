"""The work queues of worker targets, on SQLite and PostgreSQL: hand-off,
claim order, leases, reports, expiry, capacity, cancel."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from cronman.errors import NotFound, StaleLease
from cronman.models import RunUpdate
from cronman.store import open_store
from cronman.store.work_records import WorkOrder
from cronman.timeutil import utcnow
from tests.support.store_data import base_time, job_spec, make_run

WORKER_TARGET = {"kind": "worker", "queue": "spark", "payload": {"n": 1},
                 "heartbeat_timeout": 60, "timeout": 3600, "capacity": None}


@pytest.fixture
def job(store):
    (j,) = store.jobs.create_jobs([job_spec("work-job", target=WORKER_TARGET)])
    return j


def _order(run, job, *, priority=0, delivery="at_least_once", retry=None, hb=60, timeout=3600,
           capacity=None, queue="spark", attempt=1, node=None):
    return WorkOrder(
        run_id=run.id, scheduled_for=run.scheduled_for, job_id=job.id, namespace=job.namespace,
        queue=queue, priority=priority, due_at=run.scheduled_for, attempt=attempt,
        payload={"run": run.id}, heartbeat_timeout=hb, timeout=timeout, delivery=delivery,
        retry=retry or {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
        node_id=node or run.node_id or "n1",
        capacity_idle=None if capacity is None else capacity[0],
        capacity_wait=None if capacity is None else capacity[1])


def _queued(store, job, t, **kw):
    run = make_run(job.id, t, status="running")
    store.runs.claim_runs([run])
    assert store.work.enqueue(_order(run, job, **kw))
    return run


def test_enqueue_hands_the_run_over_once(store, job):
    t = base_time()
    run = _queued(store, job, t)
    row = store.runs.get_run(run.id)
    assert (row.status, row.node_id) == ("running", None)
    assert row.started_at is not None and row.lateness_ms >= 0
    # Again (a re-dispatch after its node died): no second item, still True.
    assert store.work.enqueue(_order(run, job))
    assert [q.depth for q in store.work.queues(None, now=utcnow())] == [1]
    # A node's late write, fenced on the node, leaves the row alone.
    store.runs.write_run_updates([RunUpdate(id=run.id, scheduled_for=t, status="failed",
                                            error="late")], node_id="n1")
    assert store.runs.get_run(run.id).status == "running"
    # So does an unfenced takeover (a replace on another node).
    store.runs.write_run_updates([RunUpdate(id=run.id, scheduled_for=t, status="failed",
                                            error="replaced", extra={"node_id": "n2"})],
                                 node_id="n2")
    assert store.runs.get_run(run.id).status == "running"


def test_enqueue_refuses_a_row_the_node_does_not_hold(store, job):
    run = make_run(job.id, base_time(), node="n2")
    store.runs.claim_runs([run])
    assert not store.work.enqueue(_order(run, job, node="n1"))
    assert store.work.items([run.id], now=utcnow()) == {}


def test_claims_go_by_priority_then_due_time(store, job):
    t = base_time() - timedelta(minutes=5)
    low_early = _queued(store, job, t)
    high_late = _queued(store, job, t + timedelta(seconds=2), priority=5)
    low_late = _queued(store, job, t + timedelta(seconds=1))
    now = utcnow()
    got = [store.work.claim("default", "spark", "w1", slots=5, now=now) for _ in range(4)]
    assert [c.run.id for c in got[:3]] == [high_late.id, low_early.id, low_late.id]
    assert got[3] is None
    first = got[0]
    assert first.item.payload == {"run": high_late.id}
    assert first.item.attempt == 1 and first.item.worker_id == "w1"
    assert first.run.status == "running" and first.run.node_id is None
    assert len(first.lease_token) >= 40
    # Another namespace's queue of the same name is another queue.
    assert store.work.claim("other", "spark", "w1", slots=1, now=now) is None
    (stats,) = [q for q in store.work.queues(["default"], now=now)]
    assert (stats.depth, stats.held) == (0, 3)
    assert [(w.id, w.held, w.slots) for w in stats.workers] == [("w1", 3, 5)]


def test_heartbeat_complete_and_stale_tokens(store, job):
    run = _queued(store, job, base_time())
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    later = now + timedelta(seconds=10)
    ack = store.work.heartbeat(run.id, claim.lease_token, progress="half", percent=50,
                               now=later)
    assert not ack.cancel_requested and ack.lease_expires_at == later + timedelta(seconds=60)
    item = store.work.items([run.id], now=later)[run.id]
    assert (item.state, item.progress, item.percent) == ("held", "half", 50)
    with pytest.raises(StaleLease):
        store.work.heartbeat(run.id, "not-the-token", progress=None, percent=None, now=later)
    with pytest.raises(StaleLease):
        store.work.complete(run.id, "not-the-token", status="succeeded", result=None,
                            error=None, now=later)
    with pytest.raises(NotFound):
        store.work.heartbeat("0" * 32, claim.lease_token, progress=None, percent=None,
                             now=later)
    done = store.work.complete(run.id, claim.lease_token, status="succeeded",
                               result={"rows": 3}, error=None, now=later)
    assert done.status == "succeeded" and done.result == {"rows": 3, "worker_id": "w1"}
    assert done.duration_ms == 10_000 and done.finished_at == later
    # Completed: the token is stale now, and nothing changes.
    with pytest.raises(StaleLease):
        store.work.complete(run.id, claim.lease_token, status="failed", result=None,
                            error="again", now=later)
    assert store.runs.get_run(run.id).status == "succeeded"
    assert store.work.items([run.id], now=later) == {}


def test_a_failed_report_is_retried_after_the_backoff(store, job):
    run = _queued(store, job, base_time(), retry={"max_attempts": 2, "min_backoff": 5,
                                                  "max_backoff": 60})
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    row = store.work.complete(run.id, claim.lease_token, status="failed", result=None,
                              error="boom", now=now)
    assert (row.status, row.attempt, row.error) == ("retrying", 1, "boom")
    assert row.next_attempt_at == now + timedelta(seconds=5)
    assert store.work.claim("default", "spark", "w1", slots=1, now=now) is None  # not yet
    again = store.work.claim("default", "spark", "w2", slots=1, now=now + timedelta(seconds=5))
    assert again.item.attempt == 2 and again.run.attempt == 2
    final = store.work.complete(run.id, again.lease_token, status="failed", result=None,
                                error="boom twice", now=now + timedelta(seconds=6))
    assert (final.status, final.attempt, final.error) == ("failed", 2, "boom twice")
    assert final.result == {"worker_id": "w2"}


def test_worker_runs_ended_by_their_reports_count_for_the_breaker(store):
    (job,) = store.jobs.create_jobs([job_spec("guarded-work", target=WORKER_TARGET,
                                              pause_after_failures=2)])
    t = base_time()
    for i in range(2):
        run = _queued(store, job, t - timedelta(minutes=5 * i),
                      retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1})
        claim = store.work.claim("default", "spark", "w1", slots=1, now=utcnow())
        assert claim is not None and claim.run.id == run.id
        store.work.complete(run.id, claim.lease_token, status="failed", result=None,
                            error=f"boom {i}", now=utcnow())
    got = store.jobs.get_job(job.id)
    assert got.paused and "2 consecutive failed runs" in (got.pause_reason or "")
    assert "boom 1" in got.pause_reason


def test_a_lapsed_lease_is_requeued_or_lost(store, job):
    t = base_time()
    kept = _queued(store, job, t)
    lost = _queued(store, job, t + timedelta(seconds=1), delivery="at_most_once")
    now = utcnow()
    claims = [store.work.claim("default", "spark", "w1", slots=2, now=now) for _ in range(2)]
    assert store.work.expire(now + timedelta(seconds=59)).total == 0
    report = store.work.expire(now + timedelta(seconds=61))
    assert (report.requeued, report.lost) == (1, 1)
    lost_row = store.runs.get_run(lost.id)
    assert lost_row.status == "lost"
    assert lost_row.error == "lease lost: no heartbeat for 60 s from worker w1"
    kept_row = store.runs.get_run(kept.id)
    assert kept_row.status == "retrying" and kept_row.error.startswith("lease lost")
    # The late worker's report is refused: its lease is gone.
    by_run = {c.run.id: c for c in claims}
    with pytest.raises(StaleLease):
        store.work.complete(kept.id, by_run[kept.id].lease_token, status="succeeded",
                            result=None, error=None, now=now + timedelta(seconds=62))
    again = store.work.claim("default", "spark", "w2", slots=1, now=now + timedelta(seconds=62))
    assert again.run.id == kept.id and again.item.attempt == 2


def test_the_timeout_ends_an_attempt_whatever_its_heartbeats(store, job):
    run = _queued(store, job, base_time(), timeout=30)
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    store.work.heartbeat(run.id, claim.lease_token, progress=None, percent=None,
                         now=now + timedelta(seconds=25))
    assert store.work.expire(now + timedelta(seconds=29)).total == 0
    assert store.work.expire(now + timedelta(seconds=31)).failed == 1
    row = store.runs.get_run(run.id)
    assert (row.status, row.error) == ("failed", "timed out after 30 s")


def test_capacity_holds_a_run_back_until_its_wait_runs_out(store, job):
    t = utcnow() - timedelta(seconds=1)
    run = _queued(store, job, t, capacity=(2, 30), retry={"max_attempts": 1})
    now = utcnow()
    # One worker asking is one idle worker of the two needed.
    assert store.work.claim("default", "spark", "w1", slots=1, now=now) is None
    assert store.work.items([run.id], now=now)[run.id].state == "waiting_capacity"
    assert store.work.expire(now + timedelta(seconds=20)).total == 0
    report = store.work.expire(now + timedelta(seconds=40))
    assert report.failed == 1
    row = store.runs.get_run(run.id)
    assert (row.status, row.error) == ("failed", "waiting for capacity on queue spark: 1 of 2 idle")


def test_capacity_met_lets_the_claim_through(store, job):
    run = _queued(store, job, utcnow() - timedelta(seconds=1), capacity=(2, 30))
    now = utcnow()
    assert store.work.claim("default", "spark", "w1", slots=1, now=now) is None
    claim = store.work.claim("default", "spark", "w2", slots=1, now=now)
    assert claim is not None and claim.run.id == run.id


def test_cancel_ends_a_queued_run_and_flags_a_held_one(store, job):
    t = base_time()
    queued = _queued(store, job, t, priority=-1)
    held = _queued(store, job, t + timedelta(seconds=1))
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    assert claim.run.id == held.id
    assert store.work.cancel(queued.id, "not needed", now=now).state == "queued"
    row = store.runs.get_run(queued.id)
    assert (row.status, row.error) == ("failed", "cancelled: not needed")
    assert store.work.cancel(held.id, None, now=now).state == "held"
    ack = store.work.heartbeat(held.id, claim.lease_token, progress=None, percent=None, now=now)
    assert ack.cancel_requested
    # The worker stops and says so: failed, cancelled, no retry.
    row = store.work.complete(held.id, claim.lease_token, status="failed", result=None,
                              error="terminated", now=now)
    assert (row.status, row.error) == ("failed", "cancelled (terminated)")
    assert store.work.cancel(held.id, None, now=now) is None


def test_a_cancelled_run_whose_worker_is_gone_fails_at_its_lease_end(store, job):
    run = _queued(store, job, base_time())
    now = utcnow()
    store.work.claim("default", "spark", "w1", slots=1, now=now)
    store.work.cancel(run.id, "stop", now=now)
    assert store.work.expire(now + timedelta(seconds=61)).failed == 1
    row = store.runs.get_run(run.id)
    assert (row.status, row.error) == ("failed", "cancelled: stop")


def test_an_enqueue_wakes_one_waiter_of_its_queue(store, job):
    woke: list[tuple[int, float]] = []
    ready = threading.Barrier(3)

    def waiter(n):
        with store.work.waiting("default", "spark") as w:
            ready.wait()
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                if w.wait(deadline - time.monotonic()):
                    woke.append((n, time.monotonic()))
                    return

    threads = [threading.Thread(target=waiter, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    ready.wait()
    sent = time.monotonic()
    _queued(store, job, base_time())
    for t in threads:
        t.join(6)
    # One run, one waiter woken (the other slept its wait out), and soon.
    assert len(woke) == 1 and woke[0][1] - sent < 0.9
    # No waiter: nothing is kept for later ones (once the announcement was heard:
    # the listener's slice is 1 s).
    _queued(store, job, base_time() + timedelta(seconds=1))
    time.sleep(1.2)
    with store.work.waiting("default", "spark") as w:
        assert not w.wait(0.3)


def test_a_claim_takes_up_to_its_limit_in_claim_order(store, job):
    t = base_time() - timedelta(minutes=5)
    runs = [_queued(store, job, t + timedelta(seconds=i)) for i in range(5)]
    high = _queued(store, job, t + timedelta(seconds=9), priority=3, hb=30)
    now = utcnow()
    got = store.work.claim_many("default", "spark", "w1", slots=10, now=now, limit=4)
    assert [c.run.id for c in got] == [high.id] + [r.id for r in runs[:3]]
    assert len({c.lease_token for c in got}) == 4
    assert got[0].item.lease_expires_at == now + timedelta(seconds=30)
    assert got[1].item.lease_expires_at == now + timedelta(seconds=60)
    assert all(c.run.status == "running" and c.item.worker_id == "w1" for c in got)
    assert [c.run.attempt for c in got] == [1, 1, 1, 1]
    assert store.runs.get_run(got[1].run.id).lease_expires_at == now + timedelta(seconds=60)
    (stats,) = store.work.queues(["default"], now=now)
    assert (stats.depth, stats.held, [(w.id, w.held) for w in stats.workers]) == (
        2, 4, [("w1", 4)])
    # Each lease is its own: one run's token is no other's.
    with pytest.raises(StaleLease):
        store.work.heartbeat(got[1].run.id, got[0].lease_token, progress=None, percent=None,
                             now=now)
    rest = store.work.claim_many("default", "spark", "w2", slots=10, now=now, limit=10)
    assert [c.run.id for c in rest] == [r.id for r in runs[3:]]
    assert store.work.claim_many("default", "spark", "w2", slots=10, now=now, limit=10) == []


def test_a_heartbeat_keeps_to_its_namespaces_and_touches_its_worker_seldom(store, job):
    run = _queued(store, job, base_time())
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    with pytest.raises(StaleLease):  # the run's queue is in none of them: nothing changes
        store.work.heartbeat(run.id, claim.lease_token, progress="x", percent=1,
                             now=now + timedelta(seconds=5), namespaces={"other"})
    item = store.work.items([run.id], now=now)[run.id]
    assert (item.progress, item.lease_expires_at) == (None, now + timedelta(seconds=60))
    later = now + timedelta(seconds=7)
    ack = store.work.heartbeat(run.id, claim.lease_token, progress="half", percent=None,
                               now=later, namespaces={"default"})
    assert ack.lease_expires_at == later + timedelta(seconds=60)
    # Progress given once stays until another comes.
    store.work.heartbeat(run.id, claim.lease_token, progress=None, percent=None,
                         now=later + timedelta(seconds=1))
    item = store.work.items([run.id], now=later)[run.id]
    assert (item.progress, item.last_heartbeat) == ("half", later + timedelta(seconds=1))
    assert item.lease_expires_at == later + timedelta(seconds=61)
    # The worker's row: seen at the first heartbeat, not again within WORKER_TOUCH.
    (w,) = store.work.queues(["default"], now=later)[0].workers
    assert w.last_seen == later


def test_two_claimers_never_take_one_run(database_url, job):
    """Claimers on their own stores (PostgreSQL: SKIP LOCKED; SQLite: one
    writer at a time) share out the runs, each exactly once."""
    stores = [open_store(database_url) for _ in range(2)]
    try:
        t = base_time() - timedelta(minutes=10)
        runs = [_queued(stores[0], job, t + timedelta(seconds=i)) for i in range(40)]
        got: list[list[str]] = [[], []]
        now = utcnow()

        def claimer(i):
            while True:
                c = stores[i].work.claim("default", "spark", f"w{i}", slots=100, now=now)
                if c is None:
                    return
                got[i].append(c.run.id)

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        everything = got[0] + got[1]
        assert sorted(everything) == sorted(r.id for r in runs)
        assert len(set(everything)) == len(everything)
    finally:
        for s in stores:
            s.close()


def test_runs_ended_failed_wait_for_their_dead_letter_once(store):
    (job,) = store.jobs.create_jobs([job_spec(
        "dlq-job", target=WORKER_TARGET,
        dead_letter={"kind": "http", "url": "http://127.0.0.1:9/dlq", "method": "POST",
                     "headers": {}, "body": "", "timeout": 5})])
    t = base_time()
    failed = _queued(store, job, t, retry={"max_attempts": 1})
    cancelled = _queued(store, job, t + timedelta(seconds=1))
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    assert claim.run.id == failed.id
    store.work.complete(failed.id, claim.lease_token, status="failed", result=None,
                        error="boom", now=now)
    store.work.cancel(cancelled.id, None, now=now)
    # Gone from the queue's figures and from the runs' JSON...
    assert store.work.items([failed.id, cancelled.id], now=now) == {}
    assert [(q.depth, q.held) for q in store.work.queues(None, now=now)] == [(0, 0)]
    # ...and handed out once for the dead letter.
    taken = store.work.take_ended()
    assert sorted(r.id for r in taken) == sorted([failed.id, cancelled.id])
    assert {r.status for r in taken} == {"failed"}
    assert store.work.take_ended() == []


def test_a_replayed_run_goes_back_to_its_queue(store, job):
    run = _queued(store, job, base_time())
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    store.work.complete(run.id, claim.lease_token, status="succeeded", result=None,
                        error=None, now=now)
    replayed = store.runs.request_replay(run.id)
    assert replayed.status == "claimed" and replayed.node_id is None
    (taken,) = store.runs.take_requested_runs("n1", now + timedelta(seconds=30), 10)
    assert store.work.enqueue(_order(taken, job, attempt=taken.attempt))
    again = store.work.claim("default", "spark", "w2", slots=1, now=utcnow())
    assert again.run.id == run.id and again.item.attempt == taken.attempt


def test_a_claim_skips_a_row_another_transaction_holds(database_url, store, job):
    """PostgreSQL: the claim does not wait for a locked item, it takes the next."""
    if not database_url.startswith("postgresql"):
        pytest.skip("row locks: PostgreSQL (SQLite's writers are serialised)")
    from sqlalchemy import create_engine, text

    t = base_time() - timedelta(minutes=1)
    first = _queued(store, job, t)
    second = _queued(store, job, t + timedelta(seconds=1))
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT run_id FROM work_items WHERE run_id = :r FOR UPDATE"),
                         {"r": first.id})
            started = time.monotonic()
            claim = store.work.claim("default", "spark", "w1", slots=1, now=utcnow())
            assert time.monotonic() - started < 2
            assert claim.run.id == second.id
        again = store.work.claim("default", "spark", "w1", slots=1, now=utcnow())
        assert again.run.id == first.id
    finally:
        engine.dispose()


def test_a_queued_run_of_a_deleted_job_fails(store, job):
    t = base_time()
    queued = _queued(store, job, t)
    held = _queued(store, job, t + timedelta(seconds=1))
    now = utcnow()
    claim = store.work.claim("default", "spark", "w1", slots=1, now=now)
    assert claim.run.id == queued.id
    assert store.jobs.delete_job(job.id)
    report = store.work.expire(now)
    assert report.reasons == {"deleted": 1}
    row = store.runs.get_run(held.id)
    assert (row.status, row.error) == ("failed", "job deleted before a worker claimed attempt 1")
    # The claimed one goes on: its worker reports.
    done = store.work.complete(queued.id, claim.lease_token, status="succeeded", result=None,
                               error=None, now=now)
    assert done.status == "succeeded"


def _rows_scanned(plan: dict) -> float:
    here = plan["Actual Rows"] * plan["Actual Loops"] if "Scan" in plan["Node Type"] else 0
    return here + sum(_rows_scanned(p) for p in plan.get("Plans", ()))


def test_a_claim_reads_the_head_of_a_deep_queue_not_all_of_it(database_url, store, job):
    """PostgreSQL: a claim reads about CLAIM_PICK rows however many are queued,
    in priority then due order (asking for both orders at once sorted the whole
    queue on every claim, so a backlog slowed the claims that would drain it)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("query plans: PostgreSQL")
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import Engine

    from cronman.store.work_queue import CLAIM_PICK

    t = base_time() - timedelta(minutes=30)
    runs = [make_run(job.id, t + timedelta(seconds=i), status="running") for i in range(600)]
    store.runs.claim_runs(runs)
    for i, run in enumerate(runs):
        assert store.work.enqueue(_order(run, job, priority=i % 3))
    statements: list[tuple[str, object]] = []

    def capture(_conn, _cursor, statement, parameters, _context, _many):
        if statement.lstrip().upper().startswith("SELECT") and "work_items" in statement \
                and "FOR UPDATE" not in statement.upper():
            statements.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        claim = store.work.claim("default", "spark", "w1", slots=1, now=utcnow())
    finally:
        event.remove(Engine, "before_cursor_execute", capture)
    assert claim.run.id == runs[2].id  # priority 2, due first
    assert statements
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            # On 600 rows a sequential scan is the planner's cheapest; what is checked
            # is that the index can serve the claim from the queue's head.
            conn.exec_driver_sql("SET enable_seqscan = off")
            scanned = sum(_rows_scanned(conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).scalar_one()[0]["Plan"])
                for sql, params in statements)
    finally:
        engine.dispose()
    assert scanned <= 3 * CLAIM_PICK, scanned
