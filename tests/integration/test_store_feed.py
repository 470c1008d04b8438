"""The change feed: NOTIFY between Stores on PostgreSQL, the in-process hub on SQLite."""

from __future__ import annotations

import threading
import time

import pytest

from cronman.errors import Conflict
from cronman.store import RUNS_REQUESTED, open_store
from cronman.store.changes import MAX_PAYLOAD_BYTES, split_payloads
from tests.support.store_data import job_spec


def _collect(feed, want: set[str], timeout: float) -> set[str]:
    got: set[str] = set()
    deadline = time.monotonic() + timeout
    while not want <= got and time.monotonic() < deadline:
        got.update(feed.wait(deadline - time.monotonic()))
    return got


def test_every_feed_of_a_store_hears_its_writes(store):
    feeds = [store.feed(), store.feed()]
    try:
        (job,) = store.jobs.create_jobs([job_spec("f")])
        for feed in feeds:
            assert _collect(feed, {job.id}, 2) == {job.id}
        store.jobs.update_job(job.id, {"paused": True})
        store.jobs.delete_job(job.id)
        for feed in feeds:
            heard: list[str] = []
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                heard.extend(feed.wait(deadline - time.monotonic()))
            # Two announcements of one id: heard once or twice, nothing else.
            assert set(heard) == {job.id} and len(heard) <= 2
        assert feeds[0].wait(0.05) == []
    finally:
        for feed in feeds:
            feed.close()


def test_rolled_back_write_announces_nothing(store):
    store.jobs.create_jobs([job_spec("taken")])
    feed = store.feed()
    try:
        with pytest.raises(Conflict):
            store.jobs.create_jobs([job_spec("fresh"), job_spec("taken")])
        assert feed.wait(0.3) == []
    finally:
        feed.close()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_notify_reaches_another_store_within_a_second(database_url):
    writer = open_store(database_url)
    reader = open_store(database_url)
    feed = reader.feed()
    try:
        t0 = time.monotonic()
        (job,) = writer.jobs.create_jobs([job_spec("n")])
        assert _collect(feed, {job.id}, 1.0) == {job.id}
        assert time.monotonic() - t0 < 1.0
        writer.runs.request_trigger(job, job.created_at)
        assert _collect(feed, {RUNS_REQUESTED}, 1.0) == {RUNS_REQUESTED}
    finally:
        feed.close()
        reader.close()
        writer.close()


def test_bulk_create_of_1000_announces_every_id(store):
    feed = store.feed()
    try:
        created = store.jobs.create_jobs([job_spec(f"b{i}") for i in range(1000)])
        want = {j.id for j in created}
        assert _collect(feed, want, 3) == want
    finally:
        feed.close()


def test_close_wakes_a_waiting_feed(store):
    feed = store.feed()
    result: list[list[str]] = []
    waiter = threading.Thread(target=lambda: result.append(feed.wait(30)))
    waiter.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    feed.close()
    waiter.join(5)
    assert not waiter.is_alive() and result == [[]]
    assert time.monotonic() - t0 < 2


def test_payloads_stay_under_the_limit():
    ids = [f"{i:08d}-0000-7000-8000-000000000000" for i in range(1000)]
    chunks = split_payloads(ids)
    assert all(len(c.encode()) <= MAX_PAYLOAD_BYTES for c in chunks)
    assert [i for c in chunks for i in c.split(",")] == ids
    assert len(chunks) == 5
