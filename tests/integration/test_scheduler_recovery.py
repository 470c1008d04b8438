"""Stopping and killing real scheduler processes: misfire policies on restart,
and lease recovery of runs whose node died (PostgreSQL)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from cronman.models import RunFilter
from cronman.store import open_store
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.store_data import job_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def db_url():
    with migrated_pg_database() as url:
        yield url


@pytest.fixture
def store(db_url):
    s = open_store(db_url)
    yield s
    s.close()


def _runs(store, job_id):
    return sorted(store.runs.list_runs(job_id, RunFilter(), 1000, None).items,
                  key=lambda r: r.scheduled_for)


def test_misfire_policies_after_a_node_was_killed(tmp_path, db_url, store):
    grace = 3
    specs = [job_spec(policy, schedule={"kind": "interval", "every": 1},
                      misfire={"policy": policy, "grace": grace})
             for policy in ("fire_once", "fire_all", "skip")]
    env = {"CRONMAN_LEASE_SECONDS": "3"}
    with Processes(tmp_path) as procs:
        node = procs.scheduler(db_url, "m1", env=env)
        # The jobs' target is a closed port: every run fails at once, which is
        # all this test needs (it looks at the run history only).
        jobs = {j.name: j for j in store.jobs.create_jobs(specs)}
        wait_for(lambda: all(len(_runs(store, j.id)) >= 2 for j in jobs.values()), 10, "fires")
        node.kill()
        killed = utcnow()
        time.sleep(6.0)
        node = procs.scheduler(db_url, "m1", env=env)
        ready = utcnow()
        time.sleep(3.0)
        node.stop()
    for name, job in jobs.items():
        runs = _runs(store, job.id)
        times = [r.scheduled_for for r in runs]
        assert len(set(times)) == len(times)
        # Every fire time from the first run to the last is a run or is counted
        # in the next run's skipped_before: nothing vanished silently.
        span = int((times[-1] - times[0]).total_seconds()) + 1
        assert len(runs) + sum(r.skipped_before for r in runs[1:]) == span, (
            name, [(r.scheduled_for.time().isoformat(), r.skipped_before) for r in runs])
        gap = [r for r in runs if killed + timedelta(seconds=1) < r.scheduled_for <= ready]
        after_gap = [r for r in runs[1:] if r.skipped_before]
        # SPEC §3: fire times within grace of the restart fire as usual under
        # every policy; older ones are misfires, and the policy decides.
        misfire_cut = ready - timedelta(seconds=grace + 1)
        if name == "fire_all":
            assert after_gap == [], after_gap  # every fire time fired, late
            assert len([r for r in gap if r.scheduled_for < misfire_cut]) >= 1, gap
            continue
        assert len(after_gap) == 1, (name, runs)
        carrier = after_gap[0]
        if name == "fire_once":
            # The latest misfire once, carrying the count; then the rest as usual.
            assert carrier.skipped_before >= 1
            assert gap[0] == carrier, gap
        else:
            # skip: no misfire fired; the first fire within grace carries the count.
            assert carrier.skipped_before >= 2
            assert not [r for r in gap if r.scheduled_for < misfire_cut], gap


def test_lease_recovery_redispatches_at_least_once_and_loses_at_most_once(
        tmp_path, db_url, store):
    env = {"CRONMAN_LEASE_SECONDS": "3"}
    with Receiver() as rx, Processes(tmp_path) as procs:
        rx.reply("/alo", status=204, delay=30)
        rx.reply("/amo", status=204, delay=30)
        at = format_rfc3339((utcnow() + timedelta(seconds=3)).replace(microsecond=0))
        alo, amo = store.jobs.create_jobs([
            job_spec("alo", schedule={"kind": "once", "at": at}, delivery="at_least_once",
                     target={"kind": "http", "url": rx.url("/alo"), "method": "POST",
                             "headers": {}, "body": "", "timeout": 60}),
            job_spec("amo", schedule={"kind": "once", "at": at}, delivery="at_most_once",
                     target={"kind": "http", "url": rx.url("/amo"), "method": "POST",
                             "headers": {}, "body": "", "timeout": 60},
                     dead_letter={"kind": "http", "url": rx.url("/dlq")}),
        ])
        a = procs.scheduler(db_url, "dies", env=env)
        rx.wait_for(1, timeout=10, path="/alo")
        rx.wait_for(1, timeout=5, path="/amo")
        time.sleep(1.2)  # past the lease renewal tick: the runs are marked running
        a.kill()
        rx.reply("/alo", status=204)  # the second attempt answers at once
        b = procs.scheduler(db_url, "survivor", env=env)
        [first, second] = rx.wait_for(2, timeout=15, path="/alo")
        assert first.header("Cronman-Run-Id") == second.header("Cronman-Run-Id")
        assert (first.header("Cronman-Attempt"), second.header("Cronman-Attempt")) == ("1", "2")
        wait_for(lambda: _runs(store, alo.id)[0].status == "succeeded", 5, "alo to succeed")
        [run] = _runs(store, alo.id)
        assert run.attempt == 2 and run.node_id == "survivor"
        lost = wait_for(lambda: [r for r in _runs(store, amo.id) if r.status == "lost"], 10,
                     "amo to be lost")
        assert "at_most_once" in lost[0].error
        assert len(rx.requests_for("/amo")) == 1
        [dlq] = rx.wait_for(1, timeout=5, path="/dlq")
        assert b'"lost"' in dlq.body
        assert b.stop() == 0
