"""The circuit breaker and the run limit in the store (SQLite and PostgreSQL):
the ends of counted runs, once each, in the transaction that writes them."""

from __future__ import annotations

from datetime import timedelta

from cronman.models import RunUpdate
from cronman.timeutil import utcnow
from cronman.vocabulary import BUFFERED_PREFIX
from tests.support.store_data import base_time, job_spec, make_run


def _claim(store, job, n, start=0):
    t0 = base_time()
    runs = [make_run(job.id, t0 + timedelta(seconds=start + i), attempt=1) for i in range(n)]
    store.runs.claim_runs(runs)
    return runs


def _end(store, job, run, status, error=None, node="n1"):
    store.runs.write_run_updates([RunUpdate(
        id=run.id, scheduled_for=run.scheduled_for, status=status, attempt=1,
        finished_at=utcnow(), error=error, counted_job=job.id)], node_id=node)


def test_failures_in_a_row_pause_the_job_with_the_reason_and_a_history_entry(store):
    (job,) = store.jobs.create_jobs([job_spec("breaker", pause_after_failures=3)])
    runs = _claim(store, job, 5)
    _end(store, job, runs[0], "failed", "HTTP 500")
    _end(store, job, runs[1], "succeeded")  # resets the streak
    _end(store, job, runs[2], "failed", "HTTP 502")
    _end(store, job, runs[3], "lost", "lease expired")
    j = store.jobs.get_job(job.id)
    assert (j.paused, j.failure_streak, j.runs_done, j.version) == (False, 2, 4, 1)
    _end(store, job, runs[4], "failed", "HTTP 503: down")
    j = store.jobs.get_job(job.id)
    assert j.paused and j.failure_streak == 3 and j.version == 2
    assert j.pause_reason == ("paused after 3 consecutive failed runs; last error: "
                              "HTTP 503: down")
    (entry,) = store.history.list_history(job.id, 10, None).items
    assert (entry.action, entry.actor_name, entry.job_version) == ("pause", "scheduler", 2)
    assert entry.details["failure_streak"] == 3
    # The change is on the feed: nodes see the pause.
    assert [c.id for c in store.jobs.jobs_changed_since(job.change_seq)] == [job.id]


def test_an_end_written_twice_counts_once(store):
    (job,) = store.jobs.create_jobs([job_spec("twice", pause_after_failures=2)])
    (run,) = _claim(store, job, 1)
    _end(store, job, run, "failed", "boom")
    _end(store, job, run, "failed", "boom")  # a retried batch, an outcome mark
    j = store.jobs.get_job(job.id)
    assert (j.failure_streak, j.runs_done, j.paused) == (1, 1, False)


def test_the_fence_holds_for_counted_ends(store):
    (job,) = store.jobs.create_jobs([job_spec("fenced", max_runs=5)])
    (run,) = _claim(store, job, 1)
    _end(store, job, run, "succeeded", node="n2")  # not the run's node: refused
    assert store.runs.get_run(run.id).status == "claimed"
    assert store.jobs.get_job(job.id).runs_done == 0


def test_max_runs_makes_the_job_done_and_skips_do_not_count(store):
    (job,) = store.jobs.create_jobs([job_spec("limited", max_runs=2)])
    runs = _claim(store, job, 3)
    _end(store, job, runs[0], "skipped", "forbid")
    _end(store, job, runs[1], "failed", "x")
    assert store.jobs.get_job(job.id).done_at is None
    _end(store, job, runs[2], "succeeded")
    j = store.jobs.get_job(job.id)
    assert j.done_at is not None and j.paused and j.runs_done == 2
    assert j.deleted_at is None
    (entry,) = store.history.list_history(job.id, 10, None).items
    assert entry.action == "done" and entry.details == {"max_runs": 2, "runs_done": 2}


def test_a_batch_with_counted_and_plain_updates(store):
    (counted,) = store.jobs.create_jobs([job_spec("counted", max_runs=100)])
    (plain,) = store.jobs.create_jobs([job_spec("plain")])
    a = _claim(store, counted, 3)
    b = _claim(store, plain, 3)
    now = utcnow()
    updates = [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded",
                         attempt=1, finished_at=now, counted_job=counted.id) for r in a]
    updates += [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="failed",
                          attempt=1, finished_at=now, error="e") for r in b]
    store.runs.write_run_updates(updates, node_id="n1")
    assert store.jobs.get_job(counted.id).runs_done == 3
    assert store.jobs.get_job(plain.id).runs_done == 0
    assert {store.runs.get_run(r.id).status for r in a} == {"succeeded"}
    assert {store.runs.get_run(r.id).status for r in b} == {"failed"}


def test_buffered_runs_are_counted_by_their_error(store):
    (job,) = store.jobs.create_jobs([job_spec("buffered", concurrency="buffer_all")])
    runs = _claim(store, job, 3)
    store.runs.write_run_updates([RunUpdate(
        id=r.id, scheduled_for=r.scheduled_for, status="claimed",
        error=f"{BUFFERED_PREFIX}waiting for run x to end (buffer_all)",
        gate={"buffered": {"behind": ["x"]}}) for r in runs[1:]], node_id="n1")
    assert store.runs.count_buffered(job.id) == 2
    _end(store, job, runs[1], "skipped", "replaced")
    assert store.runs.count_buffered(job.id) == 1
