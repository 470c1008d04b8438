"""The operator's reads of the store: runs across jobs, run statistics, the
job list by name -- on SQLite and PostgreSQL; on PostgreSQL, every statement
they issue is planned over the partitions of its window only."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import event

from cronman.errors import ValidationError
from cronman.models import JobFilter, RunSearch, RunStatsQuery, RunUpdate
from cronman.store.run_search import percentile
from cronman.timeutil import utcnow
from tests.support.store_data import job_spec, make_run

SQS = {"kind": "sqs", "queue_url": "http://127.0.0.1:9/q", "region": "us-east-1", "body": ""}


def seed(store, base, *, days=3, every=timedelta(hours=1)):
    """Jobs in namespaces a (http) and b (sqs); a run of each per ``every`` over
    ``days`` days before ``base``, statuses cycling; returns (jobs, runs by id)."""
    jobs = store.jobs.create_jobs([
        job_spec("alpha", namespace="a"), job_spec("beta", namespace="a"),
        job_spec("gamma", namespace="b", target=SQS)])
    runs = []
    statuses = ["succeeded", "failed", "succeeded", "lost", "skipped", "succeeded"]
    t = base
    i = 0
    while t > base - timedelta(days=days):
        for job in jobs:
            status = statuses[i % len(statuses)]
            runs.append((make_run(job.id, t), status, None if status == "skipped" else i % 97))
            i += 1
        t -= every
    assert len(store.runs.claim_runs([r for r, _, _ in runs])) == len(runs)
    store.runs.write_run_updates([
        RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status=s, lateness_ms=late)
        for r, s, late in runs])
    return jobs, {r.id: (r, s, late) for r, s, late in runs}


@pytest.fixture
def base():
    return utcnow().replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)


@pytest.fixture
def seeded(store, base):
    if store.dialect == "postgresql":
        store.partitions.ensure_days([(base - timedelta(days=d)).date() for d in range(5)])
    return seed(store, base)


def all_pages(store, query, limit):
    seen, cursor = [], None
    while True:
        page = store.runs.search_runs(query, limit, cursor)
        seen.extend(page.items)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_search_runs_newest_first_across_jobs_and_pages(store, seeded, base):
    jobs, runs = seeded
    query = RunSearch(since=base - timedelta(days=10))
    seen = all_pages(store, query, 7)
    assert sorted(r.id for r in seen) == sorted(runs)
    keys = [(r.scheduled_for, r.id) for r in seen]
    assert keys == sorted(keys, reverse=True)


def test_search_runs_filters(store, seeded, base):
    jobs, runs = seeded
    alpha, beta, gamma = jobs
    since = base - timedelta(hours=12)

    def ids(**kw):
        return {r.id for r in all_pages(store, RunSearch(since=since, **kw), 50)}

    def expect(pred):
        return {rid for rid, (r, s, _) in runs.items()
                if r.scheduled_for >= since and pred(r, s)}

    assert ids() == expect(lambda r, s: True)
    assert ids(statuses=("failed", "lost")) == expect(lambda r, s: s in ("failed", "lost"))
    assert ids(namespace="a") == expect(lambda r, s: r.job_id in (alpha.id, beta.id))
    assert ids(namespaces=("b",)) == expect(lambda r, s: r.job_id == gamma.id)
    assert ids(namespaces=()) == set()
    assert ids(job_ids=(beta.id,)) == expect(lambda r, s: r.job_id == beta.id)
    assert ids(target_kinds=("sqs",)) == expect(lambda r, s: r.job_id == gamma.id)
    assert ids(target_kinds=("http",), statuses=("failed",)) == expect(
        lambda r, s: r.job_id != gamma.id and s == "failed")
    until = base - timedelta(hours=3)
    assert ids(until=until) == expect(lambda r, s: r.scheduled_for < until)
    # The deleted job's runs stay in the history.
    store.jobs.delete_job(alpha.id)
    assert ids(namespace="a") == expect(lambda r, s: r.job_id in (alpha.id, beta.id))


def test_search_runs_ties_are_ordered_by_id(store):
    jobs = store.jobs.create_jobs([job_spec(f"tie-{i}") for i in range(9)])
    t = utcnow().replace(microsecond=0)
    store.runs.claim_runs([make_run(j.id, t) for j in jobs])
    seen = all_pages(store, RunSearch(since=t - timedelta(minutes=1)), 2)
    assert [r.id for r in seen] == sorted((r.id for r in seen), reverse=True)
    assert len(seen) == 9


def test_search_runs_refuses_a_foreign_cursor(store, seeded, base):
    with pytest.raises(ValidationError) as err:
        store.runs.search_runs(RunSearch(since=base - timedelta(days=1)), 5, "bm90LWEtY3Vyc29y")
    assert err.value.field == "cursor"


def test_run_stats_per_step(store, seeded, base):
    jobs, runs = seeded
    since = base - timedelta(hours=6)
    step = 3600
    got = store.runs.run_stats(RunStatsQuery(since=since, until=base + timedelta(hours=1),
                                             step_seconds=step))
    assert got, "no buckets"
    for bucket in got:
        inside = [(r, s, late) for r, s, late in runs.values()
                  if bucket.start <= r.scheduled_for < bucket.start + timedelta(seconds=step)]
        late = sorted(x for _, _, x in inside if x is not None)
        assert bucket.fires == sum(1 for _, s, _ in inside if s != "skipped")
        assert bucket.failures == sum(1 for _, s, _ in inside if s in ("failed", "lost"))
        assert bucket.lateness_p50_ms == percentile(late, 0.5)
        assert bucket.lateness_p99_ms == percentile(late, 0.99)
    assert [b.start for b in got] == sorted(b.start for b in got)
    scoped = store.runs.run_stats(RunStatsQuery(since=since, until=base + timedelta(hours=1),
                                                step_seconds=step, namespaces=("b",)))
    assert sum(b.fires for b in scoped) == sum(
        1 for r, s, _ in runs.values()
        if r.job_id == jobs[2].id and s != "skipped" and r.scheduled_for >= since)
    assert store.runs.run_stats(RunStatsQuery(since=since, until=base, step_seconds=60,
                                              namespaces=())) == []
    assert store.runs.run_stats(RunStatsQuery(since=since, until=base, step_seconds=60,
                                              namespace="nobody")) == []


def test_run_stats_leave_manual_runs_out_of_lateness(store, base):
    """Rows of trigger, replay and backfill runs carrying their age as lateness
    (as written before it was measured from the request) are fires, not
    lateness; a late fire of the schedule (a fire_all catch-up) is lateness."""
    (job,) = store.jobs.create_jobs([job_spec("mixed")])
    rows = [(make_run(job.id, base + timedelta(seconds=i), origin=origin), late)
            for i, (origin, late) in enumerate([
                ("schedule", 4), ("schedule", 6), ("schedule", 16_600), ("trigger", 900_000),
                ("replay", 3_600_000), ("backfill", 86_400_000), ("upstream", 9)])]
    assert len(store.runs.claim_runs([r for r, _ in rows])) == len(rows)
    store.runs.write_run_updates([
        RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded", lateness_ms=late)
        for r, late in rows])
    [bucket] = store.runs.run_stats(RunStatsQuery(
        since=base, until=base + timedelta(minutes=1), step_seconds=60))
    assert bucket.fires == len(rows)
    assert (bucket.lateness_p50_ms, bucket.lateness_p99_ms) == (6, 16_600)
    only_manual = base + timedelta(minutes=2)
    replay = make_run(job.id, only_manual, origin="replay")
    store.runs.claim_runs([replay])
    store.runs.write_run_updates([RunUpdate(id=replay.id, scheduled_for=only_manual,
                                            status="succeeded", lateness_ms=3_600_000)])
    [alone] = store.runs.run_stats(RunStatsQuery(
        since=only_manual, until=only_manual + timedelta(minutes=1), step_seconds=60))
    assert (alone.fires, alone.lateness_p50_ms, alone.lateness_p99_ms) == (1, None, None)


def test_percentile_is_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([7], 0.99) == 7
    assert percentile([1, 2, 3, 4], 0.5) == 2
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile(list(range(1, 101)), 1.0) == 100


def test_search_jobs_by_name_prefix_labels_and_order(store):
    specs = [job_spec(n, namespace=ns, labels=labels) for n, ns, labels in (
        ("report-daily", "b", {"team": "x"}), ("report-weekly", "a", {"team": "y"}),
        ("Report-caps", "a", {}), ("rep%ort", "a", {}), ("repXort", "a", {}),
        ("cleanup", "a", {"team": "x"}))]
    made = store.jobs.create_jobs(specs)
    store.jobs.update_job(made[0].id, {"paused": True})

    def names(flt, limit=2):
        out, cursor = [], None
        while True:
            page = store.jobs.search_jobs(flt, limit, cursor)
            out.extend((j.namespace, j.name) for j in page.items)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    everything = names(JobFilter())
    assert everything == sorted(everything)
    assert names(JobFilter(name_prefix="report")) == [("a", "report-weekly"), ("b", "report-daily")]
    assert names(JobFilter(name_prefix="rep%")) == [("a", "rep%ort")]
    assert names(JobFilter(name_prefix="Rep")) == [("a", "Report-caps")]
    assert names(JobFilter(labels=(("team", "x"),))) == [("a", "cleanup"), ("b", "report-daily")]
    assert names(JobFilter(paused=True)) == [("b", "report-daily")]
    assert names(JobFilter(namespaces=("b",), name_prefix="re")) == [("b", "report-daily")]
    # The id-ordered list takes the prefix too.
    page = store.jobs.list_jobs(JobFilter(name_prefix="report-"), 10, None)
    assert sorted(j.name for j in page.items) == ["report-daily", "report-weekly"]
    with pytest.raises(ValidationError):
        store.jobs.search_jobs(JobFilter(), 2, page.next_cursor or "am9i")


# -- PostgreSQL: the partition key in every plan ------------------------------

PARTITION_RE = re.compile(r"\bon (scheduled_jobs_\w+)")


@pytest.fixture
def statements(store):
    """Every statement the store sends, rendered with its parameters."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(cursor.mogrify(statement, parameters).decode())

    event.listen(store.engine, "before_cursor_execute", record)
    yield seen
    event.remove(store.engine, "before_cursor_execute", record)


def planned_partitions(store, sql):
    with store.engine.connect() as conn:
        plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql.replace("%", "%%")))
    return set(PARTITION_RE.findall(plan)), plan


@pytest.mark.postgres
def test_every_plan_prunes_to_the_window(store, base, statements, request):
    if store.dialect != "postgresql":
        pytest.skip("partitions are PostgreSQL's")
    days = [(base - timedelta(days=d)).date() for d in range(50)]
    store.partitions.ensure_days(days)
    seed(store, base, days=2, every=timedelta(hours=2))
    all_parts = set(store.partitions.existing().values())
    assert len(all_parts) >= 50
    statements.clear()
    recent = store.runs.search_runs(RunSearch(since=base - timedelta(hours=1),
                                              until=base + timedelta(minutes=1),
                                              statuses=("failed",)), 50, None)
    assert all(r.status == "failed" for r in recent.items)
    store.runs.search_runs(RunSearch(since=base - timedelta(days=45),
                                     until=base + timedelta(days=1)), 20, None)
    store.runs.search_runs(RunSearch(since=base - timedelta(days=45),
                                     until=base + timedelta(days=1), namespace="a",
                                     statuses=("lost",)), 1000, None)
    store.runs.run_stats(RunStatsQuery(since=base - timedelta(hours=1), until=base,
                                       step_seconds=60, namespaces=("a",)))
    store.runs.run_stats(RunStatsQuery(since=base - timedelta(hours=24), until=base,
                                       step_seconds=600))
    run_sql = [s for s in statements if "scheduled_jobs" in s]
    assert len(run_sql) >= 5
    for sql in run_sql:
        assert "scheduled_for >=" in sql and "scheduled_for <" in sql, sql
        parts, plan = planned_partitions(store, sql)
        assert parts, plan
        # A statement's window spans at most 32 days (the widest slice) plus edges.
        assert len(parts) <= 34, (len(parts), plan)
        assert "scheduled_jobs_default" not in parts, plan
    # The last hour's failures read one or two partitions.
    first_parts, plan = planned_partitions(store, run_sql[0])
    assert len(first_parts) <= 2, plan
