"""RunStore against SQLite and PostgreSQL: the fence, write-back, leases, history, requests."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from cronman.errors import Conflict, NotFound, ValidationError
from cronman.ids import run_id_for
from cronman.models import RunFilter, RunUpdate
from cronman.store import open_store
from cronman.timeutil import utcnow
from tests.support.store_data import base_time, job_spec, make_run


@pytest.fixture
def job(store):
    (j,) = store.jobs.create_jobs([job_spec("runs-job")])
    return j


def test_claim_is_a_fence(store, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=i)) for i in range(10)]
    first = store.runs.claim_runs(runs[:6])
    assert first == {r.id for r in runs[:6]}
    # A second claim of overlapping fire times inserts only the new ones.
    second = store.runs.claim_runs([make_run(job.id, r.scheduled_for, node="n2") for r in runs])
    assert second == {r.id for r in runs[6:]}
    assert store.runs.get_run(runs[0].id).node_id == "n1"
    assert store.runs.claim_runs([]) == set()


def test_a_batch_of_claims_and_a_mixed_batch_store_the_same_rows(store, job):
    """A node's batch of claims goes in by a narrower statement than other
    runs (one claim time, lease and node for all): the rows read back alike."""
    t0 = base_time()
    claimed_at = t0 - timedelta(seconds=1)

    def claim(t, **fields):
        return make_run(job.id, t, attempt=1, origin="schedule", **fields)

    same = [claim(t0 + timedelta(seconds=i), skipped_before=i) for i in range(3)]
    for r in same:
        r.claimed_at, r.lease_expires_at = claimed_at, claimed_at + timedelta(seconds=30)
    mixed = [claim(t0 + timedelta(seconds=10 + i), skipped_before=i) for i in range(3)]
    for r in mixed:
        r.claimed_at, r.lease_expires_at = claimed_at, claimed_at + timedelta(seconds=30)
    mixed[1].started_at = claimed_at  # a run under way: the general statement
    assert store.runs.claim_runs(same) == {r.id for r in same}
    assert store.runs.claim_runs(mixed) == {r.id for r in mixed}
    for r in same + mixed:
        assert store.runs.get_run(r.id) == r


def test_a_result_orjson_refuses_is_written_as_the_standard_encoder_would(store, job):
    run = make_run(job.id, base_time())
    store.runs.claim_runs([run])
    odd = {1: "int key", "big": 2**70}
    store.runs.write_run_updates([RunUpdate(id=run.id, scheduled_for=run.scheduled_for,
                                            status="succeeded", attempt=1, result=odd)])
    assert store.runs.get_run(run.id).result == {"1": "int key", "big": 2**70}


def test_claim_advances_the_job_cursor_never_backwards(store, job):
    t0 = base_time()
    store.runs.claim_runs([make_run(job.id, t0)], [(job.id, t0, 3)])
    got = store.jobs.get_job(job.id)
    assert got.last_fire_at == t0 and got.skipped_pending == 3
    assert got.version == job.version and got.change_seq == job.change_seq  # not a job change
    store.runs.claim_runs([], [(job.id, t0 - timedelta(minutes=5), 9)])
    got = store.jobs.get_job(job.id)
    assert got.last_fire_at == t0 and got.skipped_pending == 3
    later = t0 + timedelta(minutes=5)
    store.runs.claim_runs([make_run(job.id, later)],
                          [(job.id, t0 + timedelta(minutes=1), 1), (job.id, later, 0)])
    got = store.jobs.get_job(job.id)
    assert got.last_fire_at == later and got.skipped_pending == 0


def test_the_fence_refuses_rows_too_far_ahead_of_the_database_clock(store, job):
    """SPEC §6: with the coordinator out, the fence decides on the database's
    clock; a fast host's early rows (and their cursors) are refused, named."""
    now = utcnow().replace(microsecond=0)
    due, ahead = now - timedelta(seconds=1), now + timedelta(seconds=30)
    runs = [make_run(job.id, due), make_run(job.id, ahead)]
    got = store.runs.claim_runs(runs, [(job.id, due, 0), (job.id, ahead, 0)],
                                max_ahead_ms=5_000)
    assert got == {runs[0].id} and got.too_early == {runs[1].id}
    assert store.runs.get_run(runs[1].id) is None
    assert store.jobs.get_job(job.id).last_fire_at == due
    # Without a bound (a claim the coordinator decided), the row goes in.
    again = store.runs.claim_runs([runs[1]])
    assert again == {runs[1].id} and again.too_early == frozenset()


def test_concurrent_claims_from_threads_insert_each_run_once(database_url, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=i)) for i in range(300)]
    stores = [open_store(database_url) for _ in range(3)]
    won: list[set[str]] = [set() for _ in stores]
    barrier = threading.Barrier(len(stores))

    def claim(k: int) -> None:
        barrier.wait()
        for start in range(0, len(runs), 50):
            won[k] |= stores[k].runs.claim_runs(runs[start:start + 50],
                                                [(job.id, runs[start].scheduled_for, 0)])

    _run_per_store(stores, claim)
    assert sum(len(w) for w in won) == len(runs)
    assert set().union(*won) == {r.id for r in runs}


def test_write_run_updates_batch(store, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=i)) for i in range(5)]
    store.runs.claim_runs(runs)
    started = t0 + timedelta(milliseconds=5)
    store.runs.write_run_updates([
        RunUpdate(runs[0].id, runs[0].scheduled_for, "running", attempt=1, started_at=started,
                  lateness_ms=5),
        RunUpdate(runs[1].id, runs[1].scheduled_for, "retrying", attempt=1,
                  error="HTTP 503 (100% broken)", next_attempt_at=t0 + timedelta(seconds=2)),
        # Two changes of one run in a batch: the later one wins, None keeps.
        RunUpdate(runs[2].id, runs[2].scheduled_for, "running", attempt=1, started_at=started),
        RunUpdate(runs[2].id, runs[2].scheduled_for, "succeeded", finished_at=started,
                  duration_ms=12, result={"http_status": 204}),
    ])
    r0, r1, r2, r3 = (store.runs.get_run(r.id) for r in runs[:4])
    assert (r0.status, r0.attempt, r0.started_at, r0.lateness_ms) == ("running", 1, started, 5)
    assert r0.lease_expires_at == runs[0].lease_expires_at  # not given: kept
    assert (r1.status, r1.error) == ("retrying", "HTTP 503 (100% broken)")
    assert (r2.status, r2.attempt, r2.started_at, r2.finished_at) == (
        "succeeded", 1, started, started)
    assert (r2.duration_ms, r2.result, r2.error) == (12, {"http_status": 204}, None)
    assert r3.status == "claimed"
    # error and result are always written with the status.
    store.runs.write_run_updates([RunUpdate(runs[1].id, runs[1].scheduled_for, "succeeded",
                                            result={"http_status": 200})])
    r1 = store.runs.get_run(runs[1].id)
    assert (r1.status, r1.error, r1.result) == ("succeeded", None, {"http_status": 200})
    # extra sets other columns.
    store.runs.write_run_updates([RunUpdate(runs[3].id, runs[3].scheduled_for, "lost",
                                            error="node died", extra={"node_id": "n9"})])
    r3 = store.runs.get_run(runs[3].id)
    assert (r3.status, r3.error, r3.node_id) == ("lost", "node died", "n9")


def test_write_run_updates_fenced_on_the_node_holding_the_run(store, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=i), node="n1") for i in range(4)]
    store.runs.claim_runs(runs)
    slow, ours, moved, unfenced = runs
    # n2 took `slow` over (a sweeper): the late outcome of n1 must not land.
    taken = store.runs.take_expired_runs("n2", t0 + timedelta(hours=1),
                                         t0 + timedelta(hours=2), 1)
    assert [r.id for r in taken] == [slow.id]
    store.runs.write_run_updates([RunUpdate(slow.id, slow.scheduled_for, "succeeded", attempt=2,
                                            result={"http_status": 201})], "n2")
    store.runs.write_run_updates([
        RunUpdate(slow.id, slow.scheduled_for, "failed", attempt=1, error="late"),
        RunUpdate(ours.id, ours.scheduled_for, "succeeded", attempt=1),
    ], "n1")
    got = store.runs.get_run(slow.id)
    assert (got.status, got.attempt, got.result, got.error, got.node_id) == (
        "succeeded", 2, {"http_status": 201}, None, "n2")
    assert store.runs.get_run(ours.id).status == "succeeded"
    # An update that makes the row the writer's (extra node_id) is not fenced;
    # other extra updates are.
    store.runs.write_run_updates([
        RunUpdate(moved.id, moved.scheduled_for, "running", extra={"node_id": "n3"}),
        RunUpdate(slow.id, slow.scheduled_for, "lost", extra={"origin": "replay"}),
    ], "n3")
    assert (store.runs.get_run(moved.id).status, store.runs.get_run(moved.id).node_id) == (
        "running", "n3")
    assert store.runs.get_run(slow.id).status == "succeeded"
    # Without a node id (API, tools) nothing is fenced.
    store.runs.write_run_updates([RunUpdate(unfenced.id, unfenced.scheduled_for, "skipped")])
    assert store.runs.get_run(unfenced.id).status == "skipped"


def test_write_run_updates_large_batch(store, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=i)) for i in range(2500)]
    assert len(store.runs.claim_runs(runs)) == 2500
    store.runs.write_run_updates([RunUpdate(r.id, r.scheduled_for, "succeeded", attempt=1,
                                            result={"http_status": 200}) for r in runs])
    page = store.runs.list_runs(job.id, RunFilter(statuses=("succeeded",)), 1000, None)
    assert len(page.items) == 1000 and page.next_cursor


def test_holding_for_an_attempt_records_it_only_while_held(store, job):
    t0 = base_time()
    run = make_run(job.id, t0, node="n1", lease_seconds=10)
    store.runs.claim_runs([run])
    key = (run.id, run.scheduled_for)
    until = t0 + timedelta(seconds=90)
    assert store.runs.hold_for_attempt("n1", key, 2, until)
    got = store.runs.get_run(run.id)
    assert (got.attempt, got.lease_expires_at) == (2, until)
    assert store.runs.hold_for_attempt("n1", key, 1, until)  # never lowered
    assert store.runs.get_run(run.id).attempt == 2
    assert not store.runs.hold_for_attempt("n2", key, 3, until)  # not n2's
    store.runs.write_run_updates([RunUpdate(run.id, run.scheduled_for, "succeeded", attempt=2)])
    assert not store.runs.hold_for_attempt("n1", key, 3, until)  # ended
    assert store.runs.get_run(run.id).attempt == 2


def test_leases_renew_and_expire_to_another_node(store, job):
    t0 = base_time()
    mine = [make_run(job.id, t0 + timedelta(seconds=i), node="n1", lease_seconds=10)
            for i in range(4)]
    other = make_run(job.id, t0 + timedelta(seconds=10), node="n2", lease_seconds=10)
    store.runs.claim_runs(mine + [other])
    store.runs.write_run_updates([RunUpdate(mine[3].id, mine[3].scheduled_for, "succeeded")])
    until = t0 + timedelta(seconds=120)
    keys = [(r.id, r.scheduled_for) for r in mine] + [(other.id, other.scheduled_for)]
    # Only n1's in-flight runs are renewed (not n2's, not a finished one).
    assert store.runs.renew_leases("n1", keys, until) == 3
    assert store.runs.get_run(other.id).lease_expires_at == other.lease_expires_at

    now = t0 + timedelta(seconds=60)  # n2's lease is over, n1's are not
    taken = store.runs.take_expired_runs("n3", now, now + timedelta(seconds=30), 10)
    assert [r.id for r in taken] == [other.id]
    assert taken[0].node_id == "n3" and taken[0].lease_expires_at == now + timedelta(seconds=30)
    assert store.runs.take_expired_runs("n4", now, now + timedelta(seconds=30), 10) == []
    later = until + timedelta(seconds=1)
    taken = store.runs.take_expired_runs("n4", later, later + timedelta(seconds=30), 2)
    assert len(taken) == 2 and all(r.node_id == "n4" for r in taken)


def test_requested_runs_are_taken_once_by_concurrent_takers(database_url, store, job):
    t0 = base_time() - timedelta(hours=1)
    assert len(store.runs.request_backfill(job, [t0 + timedelta(minutes=i) for i in range(60)])) == 60
    stores = [open_store(database_url) for _ in range(3)]
    got: list[list[str]] = [[] for _ in stores]
    barrier = threading.Barrier(len(stores))

    def take(k: int) -> None:
        barrier.wait()
        while True:
            runs = stores[k].runs.take_requested_runs(f"node{k}", utcnow() + timedelta(30), 7)
            if not runs:
                return
            got[k].extend(r.id for r in runs)

    _run_per_store(stores, take)
    flat = [i for ids in got for i in ids]
    assert len(flat) == 60 and len(set(flat)) == 60
    for k, ids in enumerate(got):
        for run_id in ids[:3]:
            assert store.runs.get_run(run_id).node_id == f"node{k}"


def test_list_runs_newest_first_with_filters_and_cursor(store, job):
    t0 = base_time()
    runs = [make_run(job.id, t0 - timedelta(minutes=i)) for i in range(25)]
    (other,) = store.jobs.create_jobs([job_spec("other")])
    store.runs.claim_runs(runs + [make_run(other.id, t0)])
    store.runs.write_run_updates([RunUpdate(r.id, r.scheduled_for, "failed")
                                  for r in runs if runs.index(r) % 5 == 0])
    seen = []
    cursor = None
    while True:
        page = store.runs.list_runs(job.id, RunFilter(), 10, cursor)
        seen.extend(page.items)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert [r.id for r in seen] == [r.id for r in runs]
    failed = store.runs.list_runs(job.id, RunFilter(statuses=("failed",)), 100, None)
    assert [r.id for r in failed.items] == [r.id for r in runs[::5]]
    window = store.runs.list_runs(
        job.id, RunFilter(since=t0 - timedelta(minutes=10), until=t0 - timedelta(minutes=5)),
        100, None)
    assert [r.scheduled_for for r in window.items] == [
        t0 - timedelta(minutes=i) for i in range(6, 11)]
    with pytest.raises(ValidationError):
        store.runs.list_runs(job.id, RunFilter(), 10, "bm90LWEtY3Vyc29y")


def test_get_run_by_id(store, job):
    t = base_time() + timedelta(milliseconds=250)
    run = make_run(job.id, t)
    store.runs.claim_runs([run])
    got = store.runs.get_run(run.id)
    assert got.id == run.id and got.scheduled_for == t and got.job_id == job.id
    assert store.runs.get_run(run_id_for(job.id, t + timedelta(seconds=1))) is None
    assert store.runs.get_run("not-a-run-id") is None
    assert store.runs.get_run(job.id) is None  # a job id is no run id


def test_last_runs_and_in_flight(store):
    a, b, c = store.jobs.create_jobs([job_spec("a"), job_spec("b"), job_spec("c")])
    t0 = base_time()
    store.runs.claim_runs([make_run(a.id, t0 - timedelta(minutes=2)),
                           make_run(a.id, t0 - timedelta(minutes=1)),
                           make_run(b.id, t0 - timedelta(minutes=3))])
    store.runs.write_run_updates([RunUpdate(run_id_for(a.id, t0 - timedelta(minutes=2)),
                                            t0 - timedelta(minutes=2), "succeeded")])
    last = store.runs.last_runs([a.id, b.id, c.id])
    assert set(last) == {a.id, b.id}
    assert last[a.id].scheduled_for == t0 - timedelta(minutes=1)
    assert last[b.id].scheduled_for == t0 - timedelta(minutes=3)
    flying = store.runs.in_flight_runs([a.id, b.id, c.id])
    assert {k: [r.scheduled_for for r in v] for k, v in flying.items()} == {
        a.id: [t0 - timedelta(minutes=1)], b.id: [t0 - timedelta(minutes=3)]}


def test_trigger_is_a_requested_run(store, job):
    feed = store.feed()
    try:
        at = utcnow()
        run = store.runs.request_trigger(job, at)
        assert run.origin == "trigger" and run.status == "claimed" and run.node_id is None
        assert run.id == run_id_for(job.id, at) and run.attempt == 0
        assert store.runs.get_run(run.id).origin == "trigger"
        assert "*runs" in feed.wait(2)
        with pytest.raises(Conflict):
            store.runs.request_trigger(job, at)
        (taken,) = store.runs.take_requested_runs("n1", at + timedelta(seconds=30), 10)
        assert taken.id == run.id and taken.node_id == "n1"
        assert store.runs.take_requested_runs("n2", at + timedelta(seconds=30), 10) == []
    finally:
        feed.close()


def test_replay_puts_a_finished_run_back_in_flight(store, job):
    t0 = base_time()
    run = make_run(job.id, t0)
    store.runs.claim_runs([run])
    with pytest.raises(Conflict):
        store.runs.request_replay(run.id)  # still in flight
    store.runs.write_run_updates([RunUpdate(run.id, t0, "failed", attempt=3, started_at=t0,
                                            finished_at=t0, error="boom")])
    replayed = store.runs.request_replay(run.id)
    assert (replayed.status, replayed.node_id, replayed.attempt, replayed.origin) == (
        "claimed", None, 4, "replay")
    assert replayed.error is None and replayed.finished_at is None and replayed.result is None
    with pytest.raises(Conflict):
        store.runs.request_replay(run.id)
    with pytest.raises(NotFound):
        store.runs.request_replay(run_id_for(job.id, t0 + timedelta(hours=1)))
    with pytest.raises(NotFound):
        store.runs.request_replay("nonsense")
    (taken,) = store.runs.take_requested_runs("n1", t0 + timedelta(seconds=30), 5)
    assert taken.id == run.id


def test_backfill_stores_only_missing_fire_times(store, job):
    t0 = base_time() - timedelta(days=2)
    times = [t0 + timedelta(hours=i) for i in range(10)]
    store.runs.claim_runs([make_run(job.id, times[0]), make_run(job.id, times[5])])
    assert len(store.runs.request_backfill(job, times)) == 8
    assert store.runs.request_backfill(job, times) == []
    page = store.runs.list_runs(job.id, RunFilter(), 100, None)
    origins = {r.scheduled_for: r.origin for r in page.items}
    assert origins[times[0]] == "schedule" and origins[times[1]] == "backfill"
    assert len(store.runs.take_requested_runs("n1", utcnow(), 100)) == 8


def test_history_across_days_pages_and_last_runs(store):
    """Recent runs and runs of earlier days (PostgreSQL asks the recent partitions first)."""
    a, b = store.jobs.create_jobs([job_spec("long"), job_spec("rare")])
    t0 = base_time()
    runs = [make_run(a.id, t0 - timedelta(hours=7 * k)) for k in range(21)]  # ~6 days back
    old = make_run(b.id, t0 - timedelta(days=3, hours=5))
    store.runs.request_backfill(a, [t0 - timedelta(days=4)])  # an older day's partition
    store.runs.claim_runs(runs + [old])
    expected = sorted([r.scheduled_for for r in runs] + [t0 - timedelta(days=4)], reverse=True)
    for limit in (1, 4, 50):
        seen, cursor = [], None
        while True:
            page = store.runs.list_runs(a.id, RunFilter(), limit, cursor)
            seen.extend(r.scheduled_for for r in page.items)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        assert seen == expected, limit
    since, until = t0 - timedelta(days=2), t0 - timedelta(hours=10)
    window = store.runs.list_runs(a.id, RunFilter(since=since, until=until), 100, None)
    assert [r.scheduled_for for r in window.items] == [t for t in expected if since <= t < until]
    last = store.runs.last_runs([a.id, b.id])
    assert last[a.id].scheduled_for == t0 and last[b.id].id == old.id


def _run_per_store(stores, work) -> None:
    """Run ``work(k)`` for every store index in its own thread, then close the stores."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(stores))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in stores:
            s.close()


def test_figures_beyond_32_bits_and_text_a_database_refuses_are_stored(store, job):
    """A run replayed 40 days after its time has a lateness over 2^31 ms; a target
    may answer with NUL bytes or a broken encoding. Neither may be refused."""
    t0 = base_time() - timedelta(days=40)
    late = 40 * 86_400_000
    store.runs.claim_runs([make_run(job.id, t0, skipped_before=3_000_000_000)],
                          [(job.id, t0, 3_000_000_000)])
    store.runs.write_run_updates([RunUpdate(
        id=run_id_for(job.id, t0), scheduled_for=t0, status="succeeded", attempt=1,
        started_at=utcnow(), finished_at=utcnow(), lateness_ms=late, duration_ms=2**40,
        result={"http_status": 200, "response_snippet": "a\x00b\ud800c"},
        error="odd\x00text")], "n1")
    run = store.runs.get_run(run_id_for(job.id, t0))
    assert run.status == "succeeded" and run.lateness_ms == late
    assert run.duration_ms == 2**40 and run.skipped_before == 3_000_000_000
    assert run.result == {"http_status": 200, "response_snippet": "a\ufffdb\ufffdc"}
    assert run.error == "odd\ufffdtext"
    assert store.jobs.get_job(job.id).skipped_pending == 3_000_000_000
    # A claim (a run row inserted whole) with such text is stored as well.
    t1 = t0 + timedelta(hours=1)
    store.runs.claim_runs([make_run(job.id, t1, status="skipped", error="x\x00y",
                                    result={"k\x00": "v"})])
    run = store.runs.get_run(run_id_for(job.id, t1))
    assert run.error == "x\ufffdy" and run.result == {"k\ufffd": "v"}


def test_prepared_claims_and_results_survive_a_new_connection(pg_database_url):
    """Claims and results go as statements prepared on each connection: a
    connection the server dropped is replaced, and the new one prepares them
    again (PostgreSQL)."""
    from sqlalchemy import create_engine, text

    from tests.conftest import _truncate_pg

    _truncate_pg(pg_database_url)
    s = open_store(pg_database_url)
    try:
        (job,) = s.jobs.create_jobs([job_spec("prepared")])
        t0 = base_time()
        first = [make_run(job.id, t0 + timedelta(seconds=i)) for i in range(3)]
        assert s.runs.claim_runs(first) == {r.id for r in first}
        other = create_engine(pg_database_url)  # every connection of the store goes
        try:
            with other.connect() as conn:
                dropped = conn.execute(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar()
        finally:
            other.dispose()
        assert dropped
        again = [make_run(job.id, t0 + timedelta(seconds=10 + i)) for i in range(3)]
        for _ in range(3):  # a write on a dead connection fails once, the pool replaces it
            try:
                inserted = s.runs.claim_runs(again)
                break
            except Exception:
                continue
        assert inserted == {r.id for r in again}
        s.runs.write_run_updates(
            [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded", attempt=1,
                       result={"http_status": 204}) for r in first + again], node_id="n1")
        assert {s.runs.get_run(r.id).status for r in first + again} == {"succeeded"}
        assert s.runs.get_run(again[0].id).result == {"http_status": 204}
    finally:
        s.close()
