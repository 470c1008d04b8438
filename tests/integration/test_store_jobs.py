"""JobStore against SQLite and PostgreSQL (the ``store`` fixture runs each test on both)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from cronman.errors import Conflict, NotFound, ValidationError
from cronman.models import JobFilter
from cronman.timeutil import utcnow
from tests.support.store_data import job_spec


def test_create_get_roundtrip(store):
    start = utcnow().replace(microsecond=0) + timedelta(days=1)
    (job,) = store.jobs.create_jobs([job_spec(
        "digest", "billing", labels={"team": "billing"}, priority=5, jitter=2.5,
        start_at=start, dead_letter={"kind": "http", "url": "http://127.0.0.1:9/dl"})])
    got = store.jobs.get_job(job.id)
    assert got == job
    assert got.version == 1 and got.change_seq > 0 and got.deleted_at is None
    assert got.labels == {"team": "billing"} and got.start_at == start
    assert got.created_at.tzinfo is not None and got.created_at == got.updated_at
    assert store.jobs.get_job("no-such-id") is None


def test_name_taken_in_namespace_conflicts(store):
    store.jobs.create_jobs([job_spec("a", "ns1")])
    with pytest.raises(Conflict) as err:
        store.jobs.create_jobs([job_spec("a", "ns1")])
    assert err.value.field == "name"
    # The same name in another namespace is fine.
    store.jobs.create_jobs([job_spec("a", "ns2")])


def test_bulk_is_all_or_nothing_and_names_the_offending_spec(store):
    store.jobs.create_jobs([job_spec("taken")])
    specs = [job_spec(f"j{i}") for i in range(5)]
    specs.insert(3, job_spec("taken"))
    with pytest.raises(Conflict) as err:
        store.jobs.create_jobs(specs)
    assert err.value.field == "jobs[3].name"
    page = store.jobs.list_jobs(JobFilter(), 100, None)
    assert [j.name for j in page.items] == ["taken"]


def test_bulk_duplicate_inside_batch(store):
    specs = [job_spec("x"), job_spec("y"), job_spec("x")]
    with pytest.raises(Conflict) as err:
        store.jobs.create_jobs(specs)
    assert err.value.field == "jobs[2].name"
    assert store.jobs.list_jobs(JobFilter(), 10, None).items == []


def test_bulk_thousand_jobs(store):
    specs = [job_spec(f"bulk-{i:04d}", labels={"batch": "1"}) for i in range(1000)]
    t0 = time.perf_counter()
    created = store.jobs.create_jobs(specs)
    elapsed = time.perf_counter() - t0
    assert len(created) == 1000
    # Ids follow the order of the batch; change_seq values are distinct and ascending.
    assert [j.id for j in created] == sorted(j.id for j in created)
    seqs = [j.change_seq for j in created]
    assert seqs == sorted(seqs) and len(set(seqs)) == 1000
    assert elapsed < 5.0, f"bulk create of 1000 jobs took {elapsed:.2f}s"
    listed = store.jobs.list_jobs(JobFilter(), 1000, None)
    assert [j.name for j in listed.items] == [s["name"] for s in specs]


def test_update_bumps_version_and_change_seq(store):
    (job,) = store.jobs.create_jobs([job_spec("u")])
    updated = store.jobs.update_job(job.id, {"paused": True, "labels": {"k": "v"},
                                             "schedule": {"kind": "interval", "every": 60}})
    assert updated.version == 2 and updated.paused is True
    assert updated.change_seq > job.change_seq and updated.updated_at >= job.updated_at
    assert updated.schedule == {"kind": "interval", "every": 60}
    assert store.jobs.get_job(job.id) == updated
    with pytest.raises(NotFound):
        store.jobs.update_job("missing", {"paused": True})
    with pytest.raises(ValueError):
        store.jobs.update_job(job.id, {"version": 7})


def test_rename_collision_conflicts(store):
    a, b = store.jobs.create_jobs([job_spec("a"), job_spec("b")])
    with pytest.raises(Conflict) as err:
        store.jobs.update_job(b.id, {"name": "a"})
    assert err.value.field == "name"
    assert store.jobs.get_job(b.id).version == 1
    assert store.jobs.update_job(b.id, {"name": "c"}).name == "c"


def test_delete_is_a_tombstone_seen_by_the_change_log(store):
    (job,) = store.jobs.create_jobs([job_spec("d")])
    assert store.jobs.delete_job(job.id) is True
    assert store.jobs.delete_job(job.id) is False
    assert store.jobs.get_job(job.id) is None
    (tomb,) = store.jobs.get_jobs([job.id])
    assert tomb.deleted_at is not None and tomb.version == 2
    changed = store.jobs.jobs_changed_since(job.change_seq)
    assert [j.id for j in changed] == [job.id] and changed[0].deleted_at is not None
    # The name is free again.
    store.jobs.create_jobs([job_spec("d")])
    with pytest.raises(NotFound):
        store.jobs.update_job(job.id, {"paused": True})


def test_jobs_changed_since_is_ordered_and_limited(store):
    jobs = store.jobs.create_jobs([job_spec(f"c{i}") for i in range(5)])
    store.jobs.update_job(jobs[0].id, {"priority": 3})
    start = store.jobs.current_change_seq()
    assert start == max(j.change_seq for j in store.jobs.jobs_changed_since(0))
    store.jobs.update_job(jobs[2].id, {"priority": 1})
    store.jobs.delete_job(jobs[1].id)
    changed = store.jobs.jobs_changed_since(start)
    assert [j.id for j in changed] == [jobs[2].id, jobs[1].id]
    assert len(store.jobs.jobs_changed_since(0, limit=3)) == 3


def test_list_filters(store):
    store.jobs.create_jobs([
        job_spec("a1", "a", labels={"team": "x", "env": "prod"}),
        job_spec("a2", "a", labels={"team": "x", "env": "dev"}, paused=True),
        job_spec("b1", "b", labels={"team": "y", "env": "prod"}),
        job_spec("c1", "c", labels={"weird key": "v:w"}),
    ])

    def names(**kw) -> list[str]:
        return sorted(j.name for j in store.jobs.list_jobs(JobFilter(**kw), 100, None).items)

    assert names(namespace="a") == ["a1", "a2"]
    assert names(namespaces=("a", "c")) == ["a1", "a2", "c1"]
    assert names(namespaces=()) == []
    assert names(labels=(("team", "x"),)) == ["a1", "a2"]
    assert names(labels=(("team", "x"), ("env", "prod"))) == ["a1"]
    assert names(labels=(("env", "prod"),), namespace="b") == ["b1"]
    assert names(labels=(("team", "x"), ("team", "y"))) == []
    assert names(labels=(("weird key", "v:w"),)) == ["c1"]
    assert names(paused=True) == ["a2"]
    assert names(paused=False) == ["a1", "b1", "c1"]


def test_pagination_is_stable_under_concurrent_inserts_and_deletes(store):
    initial = store.jobs.create_jobs([job_spec(f"p{i:02d}") for i in range(40)])
    survivors = {j.id for j in initial}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.jobs.list_jobs(JobFilter(), 7, cursor)
        seen.extend(j.id for j in page.items)
        pages += 1
        # Between pages: new jobs arrive, and some jobs (seen and unseen) go away.
        store.jobs.create_jobs([job_spec(f"new{pages}")])
        for victim in (initial[pages * 3].id, initial[-pages].id):
            if store.jobs.delete_job(victim):
                survivors.discard(victim)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)), "a job was listed twice"
    assert seen == sorted(seen), "pages are not in id order"
    assert survivors <= set(seen), "a job that existed throughout was skipped"


def test_bad_cursor_is_a_validation_error(store):
    with pytest.raises(ValidationError) as err:
        store.jobs.list_jobs(JobFilter(), 10, "!!not-a-cursor")
    assert err.value.field == "cursor"


def test_iter_live_jobs_in_batches(store):
    jobs = store.jobs.create_jobs([job_spec(f"i{i}") for i in range(25)])
    store.jobs.delete_job(jobs[4].id)
    batches = list(store.jobs.iter_live_jobs(batch_size=10))
    assert [len(b) for b in batches] == [10, 10, 4]
    assert {j.id for b in batches for j in b} == {j.id for j in jobs} - {jobs[4].id}


def test_purge_tombstones_keeps_the_newest_change(store):
    jobs = store.jobs.create_jobs([job_spec(f"t{i}") for i in range(3)])
    store.jobs.delete_job(jobs[0].id)
    store.jobs.delete_job(jobs[1].id)  # the newest change of all
    later = utcnow() + timedelta(seconds=1)
    assert store.jobs.purge_tombstones(later) == 1
    remaining = {j.id for j in store.jobs.get_jobs([j.id for j in jobs])}
    assert remaining == {jobs[1].id, jobs[2].id}
    seq = store.jobs.current_change_seq()
    (new,) = store.jobs.create_jobs([job_spec("after-purge")])
    assert new.change_seq > seq


def test_concurrent_writers_get_distinct_ordered_change_seqs(store):
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(10):
                store.jobs.create_jobs([job_spec(f"w{k}-{i}")])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = [j.change_seq for j in store.jobs.jobs_changed_since(0)]
    assert len(seqs) == 40 and len(set(seqs)) == 40


def test_live_job_rows_are_lean_and_leave_out_deleted_and_unknown(store):
    from cronman.store.job_bulk import LIVE_ROW_COLUMNS

    jobs = store.jobs.create_jobs([job_spec(f"r{i}") for i in range(3)])
    store.jobs.delete_job(jobs[1].id)
    rows = store.jobs.live_job_rows([jobs[0].id, jobs[1].id, jobs[2].id, "no-such-id",
                                     jobs[0].id])
    assert sorted(r[0] for r in rows) == sorted([jobs[0].id, jobs[2].id])
    by_id = {r[0]: dict(zip(LIVE_ROW_COLUMNS, r, strict=True)) for r in rows}
    first = by_id[jobs[0].id]
    assert isinstance(first["schedule"], str) and isinstance(first["target"], str)
    assert first["version"] == jobs[0].version and first["change_seq"] == jobs[0].change_seq
    assert sorted(r for b in store.jobs.iter_live_job_rows(1) for r in b) == sorted(rows)


def test_live_job_states_give_version_pause_and_cursor(store):
    jobs = store.jobs.create_jobs([job_spec(f"v{i}") for i in range(3)])
    store.jobs.delete_job(jobs[2].id)
    states = store.jobs.live_job_states([j.id for j in jobs] + ["no-such-id"])
    assert set(states) == {jobs[0].id, jobs[1].id}
    assert states[jobs[0].id] == (jobs[0].version, False, None, 0)
