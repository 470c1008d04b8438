"""Concurrent writers of one job: the version check is in the write itself, and
PATCH changes only the keys it names (so it composes with pause and resume).

Found by probing: 20 clients doing GET then ``PATCH {"priority": p + 1,
"version": v}`` got 246 answers 200 while only 96 increments survived; and a
PATCH racing a ``POST /pause`` undid the pause in 17 of 20 trials. Both are
tested the way they were found: real threads against ``cronman api``
(gunicorn) on PostgreSQL, and on the store of each backend.

A namespace's ``max_jobs`` quota holds under a burst of creates from two API
processes at once: checked before the insert's transaction, 24 concurrent
creates (a third of them bulk creates of two) against a quota of 5 made 11.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from cronman.errors import Conflict, QuotaExceeded
from cronman.limits import Quota
from cronman.store import open_store
from tests.conftest import _truncate_pg
from tests.support.api import http, job_spec, running_api

CLIENTS = 20


def _race(clients: int, fn) -> None:
    """Run ``fn(i)`` on ``clients`` threads released at the same moment."""
    start = threading.Barrier(clients)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            fn(i)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_store_write_is_conditional_on_the_version(store):
    (job,) = store.jobs.create_jobs([{**_spec("counter"), "priority": 0}])
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def bump(_: int) -> None:
        for _ in range(10):
            current = store.jobs.get_job(job.id)
            try:
                store.jobs.update_job(job.id, {"priority": current.priority + 1},
                                      expected_version=current.version)
                outcome = "ok"
            except Conflict as exc:
                assert exc.field == "version"
                outcome = "conflict"
            with lock:
                counts[outcome] += 1

    _race(CLIENTS, bump)
    final = store.jobs.get_job(job.id)
    assert final.priority == counts["ok"] and counts["ok"] + counts["conflict"] == 200
    assert final.version == 1 + counts["ok"]
    # A stale version writes nothing, a current one writes.
    with pytest.raises(Conflict):
        store.jobs.update_job(job.id, {"priority": -1}, expected_version=1)
    assert store.jobs.get_job(job.id).priority == counts["ok"]


@pytest.fixture
def api(pg_database_url):
    _truncate_pg(pg_database_url)
    with running_api(pg_database_url, workers=2, threads=8) as base:
        yield base


@pytest.mark.postgres
def test_get_then_patch_with_version_loses_no_increment(api):
    status, job, _ = http("POST", api + "/v1/jobs", job_spec("counter", priority=0))
    assert status == 201
    url = f"{api}/v1/jobs/{job['id']}"
    answers: Counter[int] = Counter()
    lock = threading.Lock()

    def client(_: int) -> None:
        for _ in range(12):
            status, got, _ = http("GET", url)
            assert status == 200
            status, body, _ = http("PATCH", url, {"priority": got["priority"] + 1,
                                                  "version": got["version"]})
            assert status in (200, 409), (status, body)
            if status == 409:
                assert body["error"]["field"] == "version"
            with lock:
                answers[status] += 1

    _race(CLIENTS, client)
    final = http("GET", url)[1]
    assert answers[200] + answers[409] == CLIENTS * 12
    assert answers[409] > 0  # the race did happen
    assert final["priority"] == answers[200]
    assert final["version"] == 1 + answers[200]


@pytest.mark.postgres
def test_patch_composes_with_pause_and_resume(api):
    status, job, _ = http("POST", api + "/v1/jobs", job_spec("toggled"))
    assert status == 201
    url = f"{api}/v1/jobs/{job['id']}"
    for trial in range(20):
        assert http("POST", url + "/resume")[0] == 200
        pause_first = trial % 2 == 0

        def act(i: int, trial: int = trial) -> None:
            if i == 0:
                status, body, _ = http("POST", url + "/pause")
            else:
                status, body, _ = http("PATCH", url, {"priority": trial,
                                                      "labels": {"trial": str(trial)}})
            assert status == 200, body

        _race(2, act)
        got = http("GET", url)[1]
        assert got["paused"] is True, (trial, pause_first)
        assert got["priority"] == trial and got["labels"] == {"trial": str(trial)}


@pytest.mark.postgres
def test_put_without_version_is_applied_to_the_latest_state(api):
    """PUT replaces the whole definition: concurrent PUTs without a version all
    succeed, one after the other, and each leaves a whole definition."""
    status, job, _ = http("POST", api + "/v1/jobs", job_spec("replaced"))
    url = f"{api}/v1/jobs/{job['id']}"

    def put(i: int) -> None:
        spec = job_spec("replaced", priority=i, labels={"writer": str(i)})
        status, body, _ = http("PUT", url, spec)
        assert status == 200, body

    _race(8, put)
    got = http("GET", url)[1]
    assert got["version"] == 1 + 8
    assert got["labels"] == {"writer": str(got["priority"])}


def test_store_create_holds_max_jobs_against_concurrent_creates(store):
    store.limits.put_quota(Quota("pay", max_jobs=5), by=None)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def create(i: int) -> None:
        try:
            store.jobs.create_jobs([{**_spec(f"j{i}"), "namespace": "pay"}])
            outcome = "created"
        except QuotaExceeded as exc:
            assert exc.field == "namespace" and "max_jobs (5)" in exc.message
            outcome = "refused"
        with lock:
            outcomes[outcome] += 1

    _race(12, create)
    assert outcomes == {"created": 5, "refused": 7}
    assert store.jobs.count_live_jobs() == 5


@pytest.fixture
def two_apis(pg_database_url):
    """Two ``cronman api`` processes (two gunicorn workers each) on one database."""
    _truncate_pg(pg_database_url)
    with running_api(pg_database_url, workers=2, threads=8) as first, \
            running_api(pg_database_url, workers=2, threads=8) as second:
        yield pg_database_url, (first, second)


@pytest.mark.postgres
def test_max_jobs_holds_against_a_burst_of_creates_from_two_api_processes(two_apis):
    url, apis = two_apis
    answers: Counter[int] = Counter()
    lock = threading.Lock()

    def create(i: int) -> None:
        base = apis[i % 2]
        if i % 3 == 0:  # a bulk create of two
            status, body, _ = http("POST", base + "/v1/jobs/bulk", {"jobs": [
                job_spec(f"b{i}-{k}", namespace="pay") for k in range(2)]})
        else:
            status, body, _ = http("POST", base + "/v1/jobs", job_spec(f"j{i}", namespace="pay"))
        assert status in (201, 403), (status, body)
        if status == 403:
            assert body["error"]["code"] == "quota_exceeded", body
        with lock:
            answers[status] += 1

    for trial in range(3):
        _truncate_pg(url)
        store = open_store(url)
        try:
            store.limits.put_quota(Quota("pay", max_jobs=5), by=None)
        finally:
            store.close()
        answers.clear()
        _race(24, create)
        status, page, _ = http("GET", apis[0] + "/v1/jobs?namespace=pay&limit=100")
        assert status == 200
        assert len(page["items"]) <= 5, (trial, len(page["items"]), answers)
        assert answers[403] > 0 and answers[201] > 0, answers
        # Refused only when the quota is full: at most one job short of it
        # (a refused bulk create of two while one place was left).
        assert len(page["items"]) >= 4, (trial, len(page["items"]), answers)


def _spec(name: str) -> dict:
    return {
        "namespace": "default", "name": name,
        "schedule": {"kind": "interval", "every": 60, "anchor": "2026-01-01T00:00:00Z"},
        "target": {"kind": "http", "url": "https://hooks.example.com/x", "method": "POST",
                   "headers": {}, "body": "", "timeout": 10},
        "retry": {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
        "misfire": {"policy": "fire_once", "grace": 300},
        "delivery": "at_least_once", "concurrency": "allow",
    }
