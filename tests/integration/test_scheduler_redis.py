"""Two real scheduler processes coordinating through Redis (PostgreSQL store):
ownership splits the jobs, and a killed node's jobs move to the survivor."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest

from cronman.models import RunFilter
from cronman.store import open_store
from cronman.timeutil import utcnow
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.store_data import job_spec

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


def test_jobs_split_between_nodes_and_move_when_one_is_killed(tmp_path, redis_url):
    env = {"CRONMAN_REPLICAS": "1", "CRONMAN_HEARTBEAT_TTL": "2", "CRONMAN_LEASE_SECONDS": "3"}
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp_path) as procs:
        store = open_store(url)
        try:
            a = procs.scheduler(url, "red-a", redis_url=redis_url, env=env)
            procs.scheduler(url, "red-b", redis_url=redis_url, env=env)
            time.sleep(1.0)  # each node sees the other in the membership
            target = {"kind": "http", "url": rx.url("/hook"), "method": "POST", "headers": {},
                      "body": "", "timeout": 5}
            jobs = store.jobs.create_jobs([
                job_spec(f"j{i}", schedule={"kind": "interval", "every": 1}, target=target,
                         retry={"max_attempts": 1, "min_backoff": 1, "max_backoff": 1})
                for i in range(20)])

            def runs():
                return [r for j in jobs
                        for r in store.runs.list_runs(j.id, RunFilter(), 1000, None).items]

            # Wait until both nodes fired (bounded), not a fixed time: a loaded
            # machine may take a few seconds to start the processes.
            deadline = time.monotonic() + 20.0
            while True:
                before = runs()
                if {r.node_id for r in before} == {"red-a", "red-b"} or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            settled = utcnow()
            time.sleep(2.0)
            before = [r for r in runs() if r.scheduled_for > settled]
            by_node = Counter(r.node_id for r in before)
            assert set(by_node) == {"red-a", "red-b"}, by_node
            a_jobs = {r.job_id for r in before if r.node_id == "red-a"}
            b_jobs = {r.job_id for r in before if r.node_id == "red-b"}
            assert a_jobs and b_jobs and not a_jobs & b_jobs  # one owner per job

            a.kill()
            killed = utcnow()
            time.sleep(6.0)
            after = runs()
            # The survivor took over a's jobs within the heartbeat TTL (+ a heartbeat).
            moved = {r.job_id for r in after if r.node_id == "red-b"
                     and r.scheduled_for > killed} & a_jobs
            assert moved == a_jobs
            late = [r for r in after if r.job_id in a_jobs and r.node_id == "red-b"
                    and r.scheduled_for > killed]
            assert min(r.scheduled_for for r in late) < killed + timedelta(seconds=4)
            # No fire time vanished: each is a run or counted in skipped_before.
            for job in jobs:
                rs = sorted((r for r in after if r.job_id == job.id),
                            key=lambda r: r.scheduled_for)
                span = int((rs[-1].scheduled_for - rs[0].scheduled_for).total_seconds()) + 1
                assert len(rs) + sum(r.skipped_before for r in rs[1:]) == span, job.name
            deliveries = Counter((r.header("Cronman-Run-Id"), r.header("Cronman-Attempt"))
                                 for r in rx.requests_for("/hook"))
            assert max(deliveries.values()) == 1
        finally:
            store.close()
