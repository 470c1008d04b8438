"""The lease sweeper numbers the attempt it sends after the one its dead node
may have sent, on a real PostgreSQL store and the in-process coordinator.

A node marks a fire started in the coordinator and sends it before its
writer flushes the start: killed in between, it leaves a row that is still
``claimed`` with attempt 0. The sweeper must not send that run as attempt 1
again (a receiver would take the re-delivery for the first try). The dead
node is simulated by its leftovers: rows it held whose lease expired, and
the fire locks its coordinator handle claimed and started.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from cronman.callbacks.recording import RecordingTarget
from cronman.coordination.memory import InProcessCoordinator
from cronman.ids import run_id_for
from cronman.models import Run
from cronman.scheduler.fires import LOCK_TTL_MS
from cronman.store import open_store
from cronman.timeutil import to_ms, utcnow
from tests.integration.test_scheduler_sweeper_marks import never, sweep
from tests.support.databases import migrated_pg_database

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def store() -> Iterator[object]:
    with migrated_pg_database("cronman_sweep") as url:
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


def left_behind(job_id: str, seconds_ago: int, *, status: str = "claimed", attempt: int = 0,
                started: bool = False, origin: str = "schedule") -> Run:
    """A run the dead node held, its lease expired; as the row shows it."""
    now = utcnow()
    t = now.replace(microsecond=0) - timedelta(seconds=seconds_ago)
    return Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status=status,
               attempt=attempt, node_id="dead", claimed_at=t, origin=origin,
               started_at=t if started else None, lease_expires_at=now - timedelta(seconds=1))


def key(run: Run) -> tuple[str, int]:
    return (run.job_id, to_ms(run.scheduled_for))


def test_a_run_sent_before_its_start_was_written_is_sent_as_its_second_attempt(store):
    coordinator = InProcessCoordinator(ttl=2.0)
    dead = coordinator.handle()  # the dead node's locks
    (job,) = store.jobs.create_jobs([never()])
    started = left_behind(job.id, 30)  # marked started and sent; the start never written
    unstarted = left_behind(job.id, 29)  # claimed, killed before its start mark
    lockless = left_behind(job.id, 28)  # its lock gone: nobody can say
    row_started = left_behind(job.id, 27, status="running", started=True)  # Redis was down
    triggered = left_behind(job.id, 26, origin="trigger")  # a requested run: no fire lock
    retried = left_behind(job.id, 25, status="running", attempt=2, started=True)
    rows = [started, unstarted, lockless, row_started, triggered, retried]
    store.runs.claim_runs(rows)
    assert dead.claim_fires([key(started), key(unstarted)], LOCK_TTL_MS) == [1, 1]
    assert dead.start_fires([key(started)], LOCK_TTL_MS) == [1]
    assert coordinator.fires_started([key(started), key(unstarted), key(lockless)]) == [
        True, False, None]
    target = RecordingTarget("http")

    def settled() -> bool:
        return all(store.runs.get_run(r.id).status == "succeeded" for r in rows)

    sweep(store, coordinator, target, settled)
    sent = sorted((d.run_id, d.attempt) for d in target.deliveries)
    assert sent == sorted([(started.id, 2), (unstarted.id, 1), (lockless.id, 2),
                           (row_started.id, 2), (triggered.id, 2), (retried.id, 3)])
    got = {r.id: store.runs.get_run(r.id).attempt for r in rows}
    assert got == {started.id: 2, unstarted.id: 1, lockless.id: 2, row_started.id: 2,
                   triggered.id: 2, retried.id: 3}


def test_when_the_coordinator_cannot_say_the_first_attempt_counts_as_sent(store):
    coordinator = InProcessCoordinator(ttl=2.0)
    dead = coordinator.handle()
    (job,) = store.jobs.create_jobs([never()])
    unstarted = left_behind(job.id, 20)
    store.runs.claim_runs([unstarted])
    dead.claim_fires([key(unstarted)], LOCK_TTL_MS)
    cut_off = coordinator.handle()
    cut_off.set_available(False)
    target = RecordingTarget("http")
    sweep(store, cut_off, target,
          lambda: store.runs.get_run(unstarted.id).status == "succeeded")
    assert [(d.run_id, d.attempt) for d in target.deliveries] == [(unstarted.id, 2)]
