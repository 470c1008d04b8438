"""The job table: next fires, misfire catch-up, changes and ownership (pure, fake clock)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from cronman.coordination.ownership import Ownership
from cronman.models import Job
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.timeutil import from_ms, parse_rfc3339, to_ms

T0 = 1_800_000_000_000  # a whole second


def make_job(job_id: str = "job-1", *, every: float = 1, policy: str = "fire_once",
             grace: float = 3, created: int = T0 + 500, **kw: Any) -> Job:
    fields: dict[str, Any] = dict(
        id=job_id, namespace="d", name=job_id, version=1,
        schedule={"kind": "interval", "every": every},
        target={"kind": "http"}, retry={}, misfire={"policy": policy, "grace": grace},
        delivery="at_least_once", concurrency="allow", priority=0, start_at=None, end_at=None,
        jitter=None, paused=False, labels={}, dead_letter=None, created_at=from_ms(created),
        updated_at=from_ms(created))
    fields.update(kw)
    return Job(**fields)


def fires_of(table: JobTable, now: int, until: int | None = None):
    fires, cursors = table.pop_due(now, now if until is None else until)
    return ([(f.fire_ms - T0, f.skipped_before) for f in fires],
            [(to_ms(t) - T0, n) for _, t, n in cursors])


def test_new_job_fires_from_its_creation_on():
    t = JobTable("n1", 2)
    assert t.load(make_job(), T0 + 600)
    assert t.heap.peek_due() == T0 + 1000
    assert fires_of(t, T0 + 1000) == ([(1000, 0)], [])
    assert fires_of(t, T0 + 2500, T0 + 3000) == ([(2000, 0), (3000, 0)], [])
    assert t.jobs["job-1"].cursor_ms == T0 + 3000


@pytest.mark.parametrize(("policy", "fires", "cursors"), [
    # Missed: 4000..9000 (last fire 3000, now 9400, grace 2.5 s): 4000..6000
    # are misfires (older than grace), 7000..9000 fire as usual under every policy.
    ("fire_once", [(6000, 2), (7000, 0), (8000, 0), (9000, 0)], []),
    ("fire_all", [(4000, 0), (5000, 0), (6000, 0), (7000, 0), (8000, 0), (9000, 0)], []),
    ("skip", [(7000, 3), (8000, 0), (9000, 0)], []),
])
def test_misfire_on_load_after_downtime(policy, fires, cursors):
    job = make_job(policy=policy, grace=2.5, last_fire_at=from_ms(T0 + 3000))
    t = JobTable("n1", 2)
    t.load(job, T0 + 9400)
    assert fires_of(t, T0 + 9400) == (fires, cursors)
    assert fires_of(t, T0 + 10_000) == ([(10_000, 0)], [])
    assert t.take_misfires_skipped() == {"fire_once": 2, "fire_all": 0, "skip": 3}[policy]


def test_skip_carries_its_count_into_the_next_run():
    job = make_job(policy="skip", grace=0.5, last_fire_at=from_ms(T0 + 3000))
    t = JobTable("n1", 2)
    t.load(job, T0 + 9000)  # 4000..8000 are misfires; 9000 is due now and fires normally
    assert fires_of(t, T0 + 8999) == ([], [(8000, 5)])
    assert fires_of(t, T0 + 9000) == ([(9000, 5)], [])
    assert fires_of(t, T0 + 10_000) == ([(10_000, 0)], [])


def test_skip_fires_a_time_that_is_only_just_past():
    job = make_job(policy="skip", last_fire_at=from_ms(T0 + 5000))
    t = JobTable("n1", 2)
    t.load(job, T0 + 6300)  # 6000 is 300 ms late: sync lag, not a misfire
    assert fires_of(t, T0 + 6300) == ([(6000, 0)], [])


def test_long_downtime_is_counted_arithmetically_for_intervals():
    job = make_job(policy="fire_once", grace=10, last_fire_at=from_ms(T0 + 1000))
    t = JobTable("n1", 2)
    now = T0 + 1000 + 86_400_000  # a day later, 86,400 missed fire times
    t.load(job, now)
    fires, _ = fires_of(t, now)
    # The latest misfire (older than the 10 s grace) once, carrying the count of
    # the others; the 11 fire times within grace as usual.
    assert fires[0] == (86_390_000, 86_388)
    assert fires[1:] == [(86_391_000 + 1000 * i, 0) for i in range(11)]


def test_fire_all_is_bounded_within_grace():
    job = make_job(policy="fire_all", every=0.001, grace=60, last_fire_at=from_ms(T0))
    t = JobTable("n1", 2)
    t.load(job, T0 + 5000)
    fires, _ = fires_of(t, T0 + 5000)
    assert len(fires) == 1000
    assert fires[0] == (4001, 4000)
    assert fires[-1] == (5000, 0)


def test_once_job_fires_once_even_when_found_late():
    at = "2027-01-15T08:00:00Z"
    at_ms = to_ms(parse_rfc3339(at))
    job = make_job(schedule={"kind": "once", "at": at}, created=at_ms - 60_000)
    t = JobTable("n1", 2)
    t.load(job, at_ms + 2000)  # the node heard of it 2 s late, within grace
    fires, _ = t.pop_due(at_ms + 2000, at_ms + 2000)
    assert [f.fire_ms for f in fires] == [at_ms]
    assert t.heap.peek_due() is None
    # Restarted after the fire was claimed: nothing more.
    t2 = JobTable("n1", 2)
    t2.load(replace(job, last_fire_at=from_ms(at_ms)), at_ms + 5000)
    assert t2.pop_due(at_ms + 5000, at_ms + 10_000) == ([], [])


@pytest.mark.parametrize("policy", ["fire_once", "skip"])
def test_once_job_beyond_grace_follows_its_policy(policy):
    job = make_job(schedule={"kind": "once", "at": "2027-01-15T08:00:00Z"}, grace=1,
                   policy=policy,
                   created=to_ms(datetime(2027, 1, 15, 7, 0, tzinfo=from_ms(0).tzinfo)))
    at_ms = to_ms(parse_rfc3339("2027-01-15T08:00:00Z"))
    t = JobTable("n1", 2)
    t.load(job, at_ms + 10_000)
    fires, cursors = t.pop_due(at_ms + 10_000, at_ms + 10_000)
    if policy == "fire_once":  # the misfired time, once, now
        assert [(f.fire_ms, f.skipped_before) for f in fires] == [(at_ms, 0)]
        assert cursors == []
    else:
        assert fires == []
        assert [(to_ms(c[1]), c[2]) for c in cursors] == [(at_ms, 1)]


def test_change_reschedules_without_catch_up_and_drops_the_old_entry():
    t = JobTable("n1", 2)
    job = make_job()
    t.load(job, T0 + 600)
    assert fires_of(t, T0 + 1000) == ([(1000, 0)], [])
    changed = replace(job, version=2, schedule={"kind": "interval", "every": 5})
    t.load(changed, T0 + 1200)
    # Old entry (2000) is stale; the new schedule fires at 5000 (anchor = created second).
    assert fires_of(t, T0 + 4999) == ([], [])
    assert fires_of(t, T0 + 5000) == ([(5000, 0)], [])


def test_pause_and_resume_do_not_make_up_for_the_pause():
    t = JobTable("n1", 2)
    job = make_job()
    t.load(job, T0 + 600)
    fires_of(t, T0 + 1000)
    t.load(replace(job, version=2, paused=True), T0 + 1100)
    assert fires_of(t, T0 + 9000) == ([], [])
    assert t.held_version("job-1")[1]
    t.load(replace(job, version=3, paused=False), T0 + 9500)
    assert fires_of(t, T0 + 10_000) == ([(10_000, 0)], [])


def test_delete_forgets_the_job_and_remembers_the_deletion():
    t = JobTable("n1", 2)
    job = make_job()
    t.load(job, T0 + 600)
    t.load(replace(job, version=2, deleted_at=from_ms(T0 + 700)), T0 + 700)
    assert t.held_version("job-1") is None and t.is_deleted("job-1")
    assert fires_of(t, T0 + 5000) == ([], [])


def test_falling_behind_more_than_grace_applies_the_policy():
    t = JobTable("n1", 2)
    t.load(make_job(policy="fire_once", grace=2), T0 + 600)
    # The loop stalls for 10 s: 1000..10000 are past; 1000..8000 beyond grace
    # (the latest of them fires once), 9000 and 10000 within it.
    fires, _ = fires_of(t, T0 + 10_300)
    assert fires == [(8000, 7), (9000, 0), (10_000, 0)]
    assert t.heap.peek_due() == T0 + 11_000


def test_one_late_fire_within_grace_still_fires():
    t = JobTable("n1", 2)
    t.load(make_job(policy="skip", grace=5), T0 + 600)
    assert fires_of(t, T0 + 2500) == ([(1000, 0), (2000, 0)], [])


def test_jitter_delays_the_due_time_deterministically():
    t = JobTable("n1", 2)
    t.load(make_job(every=10, jitter=5), T0 + 600)
    due = t.heap.peek_due()
    assert T0 + 10_000 <= due < T0 + 15_000
    fires, _ = t.pop_due(due, due)
    assert fires[0].fire_ms == T0 + 10_000 and fires[0].due_ms == due
    t2 = JobTable("n2", 2)
    t2.load(make_job(every=10, jitter=5), T0 + 600)
    assert t2.heap.peek_due() == due


def test_priority_breaks_ties_at_the_same_due_time():
    t = JobTable("n1", 2)
    t.load(make_job("low", priority=0), T0 + 600)
    t.load(make_job("high", priority=9), T0 + 600)
    fires, _ = t.pop_due(T0 + 1000, T0 + 1000)
    assert [f.job.id for f in fires] == ["high", "low"]


def test_ownership_keeps_only_owned_jobs_and_reconciles_on_membership_change():
    members = ["n1", "n2", "n3"]
    t = JobTable("n1", 1, members)
    own = Ownership(members, "n1", 1)
    ids = [f"job-{i}" for i in range(300)]
    for job_id in ids:
        t.load(make_job(job_id), T0 + 600)
    mine = {j for j in ids if own.owns(j)}
    assert set(t.jobs) == mine
    assert set(t.others) == set(ids) - mine
    # n2 and n3 leave: every job is n1's now; the gained ones are to be loaded.
    gained = t.set_members(["n1"])
    assert set(gained) == set(ids) - mine
    for job_id in gained:
        t.load(make_job(job_id), T0 + 700)
    assert set(t.jobs) == set(ids)
    # n2 comes back: jobs it owns move away at once.
    t.set_members(["n1", "n2"])
    own2 = Ownership(["n1", "n2"], "n1", 1)
    assert set(t.jobs) == {j for j in ids if own2.owns(j)}
    assert set(t.jobs) | set(t.others) == set(ids)
    # Entries of dropped jobs are stale: only owned jobs fire.
    fires, _ = t.pop_due(T0 + 1000, T0 + 1000)
    assert {f.job.id for f in fires} == set(t.jobs)


def test_a_job_with_a_broken_schedule_is_not_scheduled():
    t = JobTable("n1", 2)
    t.load(make_job(schedule={"kind": "cron", "cron": "not a cron", "timezone": "UTC"}),
           T0 + 600)
    assert t.bad_jobs == 1
    assert t.pop_due(T0 + 10_000, T0 + 10_000) == ([], [])


def test_a_lean_row_loads_like_the_job(tmp_path):
    """``load_row`` (initial load, reloads) and ``load`` (a Job) build the same
    schedule, policies and next fire, for every kind of job, and a row whose
    version and pause state are unchanged is left alone."""
    from cronman.store import open_store
    from cronman.store.migrate import upgrade
    from tests.support.store_data import job_spec

    url = f"sqlite:///{tmp_path / 'rows.db'}"
    upgrade(url)
    store = open_store(url)
    try:
        specs = [
            job_spec("every", schedule={"kind": "interval", "every": 7}),
            job_spec("cron", schedule={"kind": "cron", "cron": "*/5 * * * *",
                                       "timezone": "Europe/Berlin"}),
            job_spec("hashed", schedule={"kind": "cron", "cron": "H 3 * * *"}),
            job_spec("hashed2", schedule={"kind": "cron", "cron": "H 3 * * *"}),
            job_spec("jitter", schedule={"kind": "interval", "every": 60}, jitter=5),
            job_spec("paused", paused=True),
            job_spec("dead", dead_letter={"kind": "http", "url": "http://127.0.0.1:9/dl"}),
            job_spec("once", schedule={"kind": "once", "at": "2099-01-01T00:00:00Z"}),
        ]
        jobs = store.jobs.create_jobs(specs)
        rows = [r for b in store.jobs.iter_live_job_rows() for r in b]
    finally:
        store.close()
    now = to_ms(jobs[0].created_at) + 1
    by_job, by_row = JobTable("n1", 1), JobTable("n1", 1)
    for job in jobs:
        by_job.load(job, now)
    for row in rows:
        by_row.load_row(row, now)
    assert set(by_row.jobs) == set(by_job.jobs) == {j.id for j in jobs}
    for job in jobs:
        a, b = by_job.jobs[job.id], by_row.jobs[job.id]
        aj, bj = by_job.job(a), by_row.job(b)
        assert aj.schedule == bj.schedule and aj.target == bj.target
        assert (a.policy, a.grace_ms, a.common.retry, a.common.dead_letter) == (
            b.policy, b.grace_ms, b.common.retry, b.common.dead_letter)
        assert a.times.next_fire_after(from_ms(now)) == b.times.next_fire_after(from_ms(now))
        assert (a.cursor_ms, a.paused, a.version) == (b.cursor_ms, b.paused, b.version)
    def entries(t: JobTable) -> list[tuple[Any, ...]]:
        return sorted(e[:4] for e in t.heap.entries())
    assert entries(by_job) == entries(by_row)
    held = dict(by_row.jobs)
    for row in rows:
        by_row.load_row(row, now)
    assert all(by_row.jobs[k] is v for k, v in held.items())


def test_jobs_prepared_ahead_of_a_gain_are_held_only_while_current(tmp_path):
    """``gained_without`` names what a member's departure would hand over;
    prepared states are admitted only with the current version and cursor,
    and only once the departure made them owned."""
    from cronman.store import open_store
    from cronman.store.migrate import upgrade
    from tests.support.store_data import job_spec

    url = f"sqlite:///{tmp_path / 'standby.db'}"
    upgrade(url)
    store = open_store(url)
    try:
        jobs = store.jobs.create_jobs([job_spec(f"s{i}", schedule={"kind": "interval",
                                                                    "every": 60})
                                       for i in range(60)])
        rows = [r for b in store.jobs.iter_live_job_rows() for r in b]
    finally:
        store.close()
    now = to_ms(jobs[0].created_at) + 1
    table = JobTable("n1", 2, ["n1", "n2", "n3"])
    for row in rows:
        table.load_row(row, now)
    expected = set(table.gained_without("n3"))
    assert expected and not expected & set(table.jobs)
    by_id = {r[0]: r for r in rows}
    prepared = {i: table.prepare_row(by_id[i]) for i in expected}
    stale = sorted(expected)[0]
    assert not table.admit_prepared(prepared[sorted(expected)[1]], 1, False, None, 0, now), \
        "not owned before the departure"
    assert set(table.set_members(["n1", "n2"])) == expected
    for job_id, p in prepared.items():
        version = 2 if job_id == stale else 1
        assert table.admit_prepared(p, version, False, None, 0, now) == (job_id != stale)
    assert expected - {stale} <= set(table.jobs) and stale not in table.jobs
    assert table.heap.peek_due() is not None
