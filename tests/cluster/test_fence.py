"""The database fence under concurrent claims from several nodes (PostgreSQL).

While Redis is down every replica of a job claims its fires through the run
row alone, so nodes insert the same new rows at the same moment. Whatever the
interleaving, a claim must insert a row or skip it -- never fail the batch
(a failed batch is a batch of fires nobody dispatches).
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest

from cronman.models import Run
from cronman.store import open_store
from tests.support.store_data import base_time, job_spec, make_run

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def pg_store(pg_database_url):
    from tests.conftest import _truncate_pg

    _truncate_pg(pg_database_url)
    store = open_store(pg_database_url)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.counts_only
def test_a_row_taken_under_its_primary_key_is_skipped_not_an_error(pg_store):
    """The primary key (id, scheduled_for) arbitrates as well as the
    (job_id, scheduled_for) fence: a row colliding on it is skipped."""
    a, b = pg_store.jobs.create_jobs([job_spec("fence-a"), job_spec("fence-b")])
    t = base_time()
    first = make_run(a.id, t)
    assert pg_store.runs.claim_runs([first]) == {first.id}
    clash = Run(id=first.id, job_id=b.id, scheduled_for=t, status="claimed", node_id="n2")
    assert pg_store.runs.claim_runs([clash]) == set()
    assert pg_store.runs.get_run(first.id).job_id == a.id


def _race(url: str, job_ids: list[str], rounds: int, nodes: int = 4
          ) -> tuple[int, int, list[str]]:
    stores = [open_store(url) for _ in range(nodes)]
    errors: list[str] = []
    won = offered = 0
    t0 = base_time()
    try:
        for rnd in range(rounds):
            at = t0 + timedelta(seconds=rnd)
            runs = [make_run(j, at) for j in job_ids]
            offered += len(runs)
            batches = [random.sample(runs, len(runs) * 3 // 4) for _ in stores]
            barrier = threading.Barrier(nodes)
            got = [0] * nodes

            def claim(k: int, barrier=barrier, batches=batches, got=got) -> None:
                barrier.wait()
                mine = [make_run(r.job_id, r.scheduled_for, node=f"n{k}") for r in batches[k]]
                try:
                    got[k] = len(stores[k].runs.claim_runs(mine))
                except Exception as exc:  # the failure under test
                    errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

            threads = [threading.Thread(target=claim, args=(k,)) for k in range(nodes)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            won += sum(got)
    finally:
        for s in stores:
            s.close()
    return won, offered, errors


@pytest.mark.slow
@pytest.mark.counts_only
def test_nodes_claiming_the_same_new_rows_at_once_never_fail(pg_store, pg_database_url):
    """Four nodes, 120 rounds of 200 new fires each, every node claiming a
    random three quarters of them at the same instant: every fire is
    inserted at most once and no claim fails. (With the fence's index as the
    only arbiter this failed a few rounds in a hundred with a primary-key
    violation.) A count of rounds, not a time: as many races on a loaded
    machine as on an idle one, so the test needs no cores of its own."""
    jobs = pg_store.jobs.create_jobs([job_spec(f"race-{i}") for i in range(200)])
    won, offered, errors = _race(pg_database_url, [j.id for j in jobs], rounds=120)
    assert not errors, f"{len(errors)} claims failed: {errors[:3]}"
    assert 0 < won <= offered
