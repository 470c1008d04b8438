"""A node that stalls past the fire lock's TTL between its claim and its
start must not send a fire a replica took over meanwhile (found by the
chaos suite: a node SIGSTOPped 126 s sent 17 fires its replica had sent
two minutes before, each as attempt 1 again).

The replica's takeover started the fire under a lock of its own, which
expires ``LOCK_TTL_MS`` later; the stalled node then finds no lock, and a
lock that is gone cannot vouch for it: the run row, taken over with the
lock, says the fire is not its any more. On a real PostgreSQL store and
the in-process coordinator, its clock moved past the lock's TTL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cronman.coordination.memory import InProcessCoordinator
from cronman.scheduler.claim.batch import claimed_run, take_over_batch
from cronman.scheduler.dispatch.start_marks import (
    START_GO,
    START_TAKEN,
    START_UNREACHABLE,
    StartMarks,
)
from cronman.scheduler.fires import LOCK_TTL_MS, ActiveRun, Fire
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store import open_store
from cronman.timeutil import to_ms, utcnow
from tests.integration.test_scheduler_sweeper_marks import never
from tests.support.databases import migrated_pg_database
from tests.support.processes import free_port

pytestmark = [pytest.mark.postgres]
LEASE = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> Iterator[Any]:
    with migrated_pg_database("cronman_stall") as url:
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


async def in_thread(fn: Any, *args: Any) -> Any:
    return fn(*args)


def marks(node_id: str, coordinator: InProcessCoordinator, store: Any) -> StartMarks:
    return StartMarks(node_id, coordinator, store.runs, lease_seconds=LEASE,
                      clock=ReferenceClock(), pool=in_thread,
                      metrics=NodeMetrics(CollectorRegistry()))


def claim(store: Any, handle: InProcessCoordinator, fire: Fire, node_id: str) -> None:
    """What a node's claimer does: the lock, then the run row."""
    assert handle.claim_fires([(fire.job.id, fire.fire_ms)], LOCK_TTL_MS) == [1]
    now = utcnow()
    assert store.runs.claim_runs([claimed_run(fire, node_id, now,
                                              now + timedelta(seconds=LEASE))])


def test_a_fire_taken_over_while_its_holder_stalled_is_not_sent_by_it(store):
    clock = Clock()
    coordinator = InProcessCoordinator(ttl=3.0, clock=clock)
    stalled, replica = coordinator.handle(), coordinator.handle()
    (job,) = store.jobs.create_jobs([never()])
    due = to_ms(utcnow()) + 500
    taken, kept = Fire(job=job, fire_ms=due, due_ms=due), Fire(job=job, fire_ms=due + 1,
                                                              due_ms=due + 1)
    claim(store, stalled, taken, "a")
    claim(store, stalled, kept, "a")
    # The holder freezes; its replica takes over the first fire (and sends it).
    res = take_over_batch([taken], coordinator=replica, runs=store.runs, node_id="b",
                          now=utcnow, lease_seconds=LEASE)
    assert [f.run_id for f in res.dispatch] == [taken.run_id]
    assert store.runs.get_run(taken.run_id).node_id == "b"
    # Past the lock's TTL, every lock is gone; the holder wakes and marks both.
    clock.now += LOCK_TTL_MS / 1000 + 1
    runs = [ActiveRun.of_fire(taken, mark_start=True), ActiveRun.of_fire(kept, mark_start=True)]
    answers = asyncio.run(marks("a", stalled, store)(runs))
    assert answers == [START_TAKEN, START_GO]
    row = store.runs.get_run(kept.run_id)
    assert (row.status, row.node_id) == ("running", "a")  # started by its row
    assert store.runs.get_run(taken.run_id).node_id == "b"
    # Its own claim's lock, still there, vouches for it: the row is not asked.
    fresh = Fire(job=job, fire_ms=due + 2, due_ms=due + 2)
    claim(store, stalled, fresh, "a")

    async def no_pool(*_: Any) -> Any:
        raise AssertionError("the lock vouches: the database is not asked")

    own = StartMarks("a", stalled, store.runs, lease_seconds=LEASE, clock=ReferenceClock(),
                     pool=no_pool, metrics=NodeMetrics(CollectorRegistry()))
    assert asyncio.run(own([ActiveRun.of_fire(fresh, mark_start=True)])) == [START_GO]


def test_a_gone_lock_and_no_database_send_nothing(store):
    coordinator = InProcessCoordinator(ttl=3.0)
    (job,) = store.jobs.create_jobs([never()])
    due = to_ms(utcnow()) + 500
    fire = Fire(job=job, fire_ms=due, due_ms=due)
    now = utcnow()
    store.runs.claim_runs([claimed_run(fire, "a", now, now + timedelta(seconds=LEASE))])
    # The database cannot be reached any more: nobody listens on its port.
    down = open_store(f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/cronman"
                      "?connect_timeout=1")
    try:
        answers = asyncio.run(marks("a", coordinator, down)(
            [ActiveRun.of_fire(fire, mark_start=True)]))
    finally:
        down.close()
    assert answers == [START_UNREACHABLE]  # left to the sweeper, sent later, never twice
