"""Run-history upkeep: daily partitions (PostgreSQL, each test on its own database) and
row expiry (SQLite)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from cronman.config import Settings
from cronman.models import RunFilter
from cronman.store import open_store
from cronman.store.migrate import upgrade
from cronman.store.partitions import MAINTENANCE_LOCK_KEY, partition_name
from cronman.timeutil import utcnow
from tests.support.store_data import job_spec, make_run


@pytest.fixture
def pg_store(fresh_pg_url):
    upgrade(fresh_pg_url)
    s = open_store(fresh_pg_url, settings=Settings(database_url=fresh_pg_url, node_id="maint-1"))
    try:
        yield s
    finally:
        s.close()


def _count(store, table: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()


def _midnight(days: int = 0) -> datetime:
    today = utcnow().date() + timedelta(days=days)
    return datetime(today.year, today.month, today.day, tzinfo=UTC)


def test_migration_creates_partitions_ahead(pg_store):
    names = set(pg_store.partitions.existing().values())
    assert names == {partition_name(_midnight(i).date()) for i in range(8)}
    assert _count(pg_store, "scheduled_jobs_default") == 0
    assert pg_store.partitions.ensure_partitions(utcnow(), 7) == []
    assert pg_store.partitions.ensure_partitions(utcnow(), 9) == [
        partition_name(_midnight(8).date()), partition_name(_midnight(9).date())]


def test_rows_land_in_their_day(pg_store):
    (job,) = pg_store.jobs.create_jobs([job_spec("p")])
    t = _midnight(1) + timedelta(hours=3)
    pg_store.runs.claim_runs([make_run(job.id, t)])
    assert _count(pg_store, partition_name(t.date())) == 1
    assert _count(pg_store, "scheduled_jobs_default") == 0


def test_creating_a_partition_moves_rows_out_of_the_default(pg_store):
    (job,) = pg_store.jobs.create_jobs([job_spec("far")])
    day = _midnight(20)
    runs = [make_run(job.id, day + timedelta(hours=h)) for h in range(5)]
    other_day = make_run(job.id, day + timedelta(days=1, hours=1))
    pg_store.runs.claim_runs(runs + [other_day])
    assert _count(pg_store, "scheduled_jobs_default") == 6
    assert pg_store.partitions.ensure_partitions(day, 0) == [partition_name(day.date())]
    assert _count(pg_store, partition_name(day.date())) == 5
    assert _count(pg_store, "scheduled_jobs_default") == 1
    # Still readable through the parent, by id and by listing.
    assert pg_store.runs.get_run(runs[2].id).scheduled_for == runs[2].scheduled_for
    page = pg_store.runs.list_runs(job.id, RunFilter(), 10, None)
    assert len(page.items) == 6
    # And new rows of that day now go to the new partition.
    pg_store.runs.claim_runs([make_run(job.id, day + timedelta(hours=9))])
    assert _count(pg_store, partition_name(day.date())) == 6


def test_drop_expired_partitions(pg_store):
    old_start = _midnight(-50)
    created = pg_store.partitions.ensure_partitions(old_start, 6)  # days -50 .. -44
    assert len(created) == 7
    (job,) = pg_store.jobs.create_jobs([job_spec("old")])
    pg_store.runs.claim_runs([make_run(job.id, old_start + timedelta(hours=1)),
                              make_run(job.id, _midnight(-44) + timedelta(hours=1))])
    dropped = pg_store.partitions.drop_expired(utcnow(), 45)
    # Days -50 .. -46 end at or before today - 45 days: dropped; -45 and -44 stay.
    assert dropped == [partition_name(_midnight(d).date()) for d in range(-50, -45)]
    days = set(pg_store.partitions.existing())
    assert _midnight(-45).date() in days and _midnight(-44).date() in days
    page = pg_store.runs.list_runs(job.id, RunFilter(), 10, None)
    assert [r.scheduled_for for r in page.items] == [_midnight(-44) + timedelta(hours=1)]
    assert pg_store.partitions.drop_expired(utcnow(), 45) == []


def test_maintenance_creates_drops_purges_and_records(pg_store):
    pg_store.partitions.ensure_partitions(_midnight(-60), 0)
    a, b = pg_store.jobs.create_jobs([job_spec("gone"), job_spec("kept")])
    (c,) = pg_store.jobs.create_jobs([job_spec("recent")])
    pg_store.jobs.delete_job(a.id)
    pg_store.jobs.delete_job(c.id)
    with pg_store.engine.begin() as conn:  # a's tombstone is old
        conn.execute(text("UPDATE jobs SET deleted_at = now() - interval '50 days' "
                          "WHERE id = :id"), {"id": a.id})
        conn.execute(text("INSERT INTO scheduled_jobs_default (id, job_id, scheduled_for, "
                          "status) VALUES ('x', :j, now() - interval '400 days', 'succeeded')"),
                     {"j": b.id})
    report = pg_store.partitions.run_maintenance(utcnow(), 10, 45)
    assert report.ran
    assert report.created == [partition_name(_midnight(d).date()) for d in (8, 9, 10)]
    assert report.dropped == [partition_name(_midnight(-60).date())]
    assert report.expired_rows == 1 and report.purged_tombstones == 1
    assert {j.id for j in pg_store.jobs.get_jobs([a.id, b.id, c.id])} == {b.id, c.id}
    with pg_store.engine.connect() as conn:
        row = conn.execute(text("SELECT node_id, ran_at FROM maintenance "
                                "WHERE name = 'partitions'")).one()
    assert row.node_id == "maint-1" and row.ran_at is not None


def test_maintenance_runs_in_one_process_at_a_time(pg_store):
    with pg_store.engine.connect() as other:
        assert other.execute(text("SELECT pg_try_advisory_lock(:k)"),
                             {"k": MAINTENANCE_LOCK_KEY}).scalar()
        try:
            assert pg_store.partitions.run_maintenance(utcnow(), 9, 45).ran is False
        finally:
            other.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MAINTENANCE_LOCK_KEY})
    assert pg_store.partitions.run_maintenance(utcnow(), 9, 45).ran is True


def test_backfill_creates_partitions_of_past_days(pg_store):
    (job,) = pg_store.jobs.create_jobs([job_spec("bf")])
    days = [_midnight(-3), _midnight(-2), _midnight(-100)]
    assert len(pg_store.runs.request_backfill(job, [d + timedelta(hours=6) for d in days])) == 3
    have = set(pg_store.partitions.existing())
    assert _midnight(-3).date() in have and _midnight(-2).date() in have
    assert _midnight(-100).date() not in have  # past the retention: default partition
    assert _count(pg_store, "scheduled_jobs_default") == 1


def test_sqlite_expiry_deletes_old_runs(sqlite_url):
    upgrade(sqlite_url)
    store = open_store(sqlite_url)
    try:
        (job,) = store.jobs.create_jobs([job_spec("s")])
        keep = make_run(job.id, _midnight(-45) + timedelta(hours=1))
        store.runs.claim_runs([make_run(job.id, _midnight(-46) + timedelta(hours=23)),
                               make_run(job.id, _midnight(-80)), keep])
        assert store.partitions.ensure_partitions(utcnow(), 7) == []
        report = store.partitions.run_maintenance(utcnow(), 7, 45)
        assert report.ran and report.expired_rows == 2
        page = store.runs.list_runs(job.id, RunFilter(), 10, None)
        assert [r.id for r in page.items] == [keep.id]
    finally:
        store.close()
