"""Every attempt of a run kept (migration 0016's trigger), on SQLite and
PostgreSQL: retries written by a node's batches, a replay, a bounded list;
a run of one attempt keeps none."""

from __future__ import annotations

from datetime import timedelta

from cronman.models import RunUpdate
from cronman.store.records import AttemptOutcome
from tests.support.store_data import base_time, job_spec, make_run

KEPT = 20  # migration 0016's ATTEMPTS_KEPT


def test_each_earlier_attempt_is_kept_with_its_outcome(store):
    (job,) = store.jobs.create_jobs([job_spec("attempts-job")])
    t0 = base_time()
    run = make_run(job.id, t0, attempt=1)
    store.runs.claim_runs([run])
    s1, s2 = t0 + timedelta(seconds=1), t0 + timedelta(seconds=5)
    write = store.runs.write_run_updates
    write([RunUpdate(run.id, t0, "running", attempt=1, started_at=s1)], node_id="n1")
    assert store.runs.earlier_attempts(run.id) == []
    write([RunUpdate(run.id, t0, "retrying", attempt=1, started_at=s1, duration_ms=40,
                     result={"http_status": 503, "response_snippet": "busy"},
                     error="HTTP 503", next_attempt_at=s2)], node_id="n1")
    assert store.runs.earlier_attempts(run.id) == []  # the row holds attempt 1 still
    write([RunUpdate(run.id, t0, "running", attempt=2, started_at=s2)], node_id="n1")
    write([RunUpdate(run.id, t0, "failed", attempt=2, started_at=s2,
                     finished_at=s2 + timedelta(seconds=1), duration_ms=7,
                     error="connection refused")], node_id="n1")
    assert store.runs.earlier_attempts(run.id) == [AttemptOutcome(
        attempt=1, status="retrying", node_id="n1", started_at=s1, duration_ms=40,
        result={"http_status": 503, "response_snippet": "busy"}, error="HTTP 503")]
    latest = store.runs.get_run(run.id)
    assert (latest.attempt, latest.status, latest.error) == (2, "failed", "connection refused")
    # A replay keeps the attempt it replaces.
    store.runs.request_replay(run.id)
    kept = store.runs.earlier_attempts(run.id)
    assert [(a.attempt, a.status, a.error) for a in kept] == [
        (1, "retrying", "HTTP 503"), (2, "failed", "connection refused")]
    assert kept[1].finished_at == s2 + timedelta(seconds=1) and kept[1].result is None
    assert store.runs.earlier_attempts("no-such-run") == []


def test_the_kept_attempts_are_bounded_and_a_single_attempt_keeps_none(store):
    (job,) = store.jobs.create_jobs([job_spec("many-attempts")])
    t0 = base_time()
    once, many = make_run(job.id, t0, attempt=1), make_run(job.id, t0 + timedelta(seconds=1),
                                                          attempt=1)
    store.runs.claim_runs([once, many])
    store.runs.write_run_updates([
        RunUpdate(once.id, once.scheduled_for, "succeeded", attempt=1, finished_at=t0)])
    for n in range(1, KEPT + 6):
        store.runs.write_run_updates([RunUpdate(many.id, many.scheduled_for, "retrying",
                                                attempt=n, error=f"failure {n}")])
        store.runs.write_run_updates([RunUpdate(many.id, many.scheduled_for, "running",
                                                attempt=n + 1)])
    assert store.runs.earlier_attempts(once.id) == []
    kept = store.runs.earlier_attempts(many.id)
    assert [a.attempt for a in kept] == list(range(6, KEPT + 6))
    assert kept[-1].error == f"failure {KEPT + 5}"
