"""Failure and concurrency behaviour: unreachable databases, many writers, several processes."""

from __future__ import annotations

import multiprocessing
import socket
import threading
from datetime import timedelta

import pytest

from cronman.errors import StoreUnavailable
from cronman.models import JobFilter, RunUpdate
from cronman.store import open_store
from cronman.store.engine import normalise_url
from cronman.store.migrate import SchemaNotCurrent, check_schema_current, head_revision
from tests.support.store_data import base_time, job_spec, make_run


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_postgres_is_store_unavailable():
    store = open_store(f"postgresql://postgres@127.0.0.1:{_closed_port()}/nowhere")
    try:
        assert store.ping() is False
        with pytest.raises(StoreUnavailable):
            store.jobs.get_job("x")
        with pytest.raises(StoreUnavailable):
            store.jobs.create_jobs([job_spec("x")])
        feed = store.feed()  # best effort: no error, nothing heard
        assert feed.wait(0.1) == []
        feed.close()
    finally:
        store.close()


def test_ping_and_schema_check(database_url, tmp_path):
    store = open_store(database_url)
    try:
        assert store.ping() is True
        assert store.dialect in ("postgresql", "sqlite")
    finally:
        store.close()
    assert check_schema_current(database_url) == head_revision()
    with pytest.raises(SchemaNotCurrent, match="cronman migrate"):
        check_schema_current(f"sqlite:///{tmp_path / 'empty.db'}")


def test_urls_are_normalised():
    assert normalise_url("postgresql://u@h/db").drivername == "postgresql+psycopg2"
    assert normalise_url("postgres://u@h/db").drivername == "postgresql+psycopg2"
    with pytest.raises(ValueError):
        normalise_url("mysql://u@h/db")


def test_many_threads_write_without_lock_errors(store):
    """API threads and scheduler threads share one Store (standalone)."""
    (job,) = store.jobs.create_jobs([job_spec("busy")])
    t0 = base_time()
    errors: list[BaseException] = []

    def scheduler(k: int) -> None:
        try:
            for i in range(20):
                t = t0 + timedelta(seconds=k * 100 + i)
                run = make_run(job.id, t)
                store.runs.claim_runs([run], [(job.id, t, 0)])
                store.runs.write_run_updates([RunUpdate(run.id, t, "succeeded")])
        except BaseException as exc:
            errors.append(exc)

    def api(k: int) -> None:
        try:
            for i in range(20):
                (j,) = store.jobs.create_jobs([job_spec(f"api{k}-{i}")])
                store.jobs.update_job(j.id, {"paused": True})
                store.jobs.list_jobs(JobFilter(), 50, None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f, args=(k,)) for k in range(3) for f in (scheduler, api)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.runs.last_runs([job.id])) == 1
    assert store.jobs.list_jobs(JobFilter(paused=True), 100, None).items.__len__() == 60


def _claim_in_process(url: str, job_id: str, start_ms: int, n: int, out) -> None:
    from cronman.timeutil import from_ms

    store = open_store(url)
    try:
        won: set[str] = set()
        runs = [make_run(job_id, from_ms(start_ms + i * 1000)) for i in range(n)]
        for k in range(0, n, 25):
            won |= store.runs.claim_runs(runs[k:k + 25])
        out.put(sorted(won))
    finally:
        store.close()


@pytest.mark.parametrize("database_url", ["postgres", "sqlite"], indirect=True)
def test_concurrent_claims_from_processes_insert_each_run_once(database_url, store):
    from cronman.timeutil import to_ms

    (job,) = store.jobs.create_jobs([job_spec("procs")])
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start = to_ms(base_time())
    procs = [ctx.Process(target=_claim_in_process, args=(database_url, job.id, start, 200, out))
             for _ in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    flat = [i for r in results for i in r]
    assert len(flat) == 200 and len(set(flat)) == 200
