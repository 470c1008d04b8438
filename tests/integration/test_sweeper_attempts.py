"""The lease sweeper numbers the attempt it sends after the one its dead node
may have sent, on a real PostgreSQL store and the in-process coordinator.

A node sends a run before its writer flushes the start: killed in between,
it leaves a row that still shows the attempt it had when taken. A fire of
the schedule is claimed as attempt 1, but a run the API requested (trigger,
backfill, an upstream's success) is taken at attempt 0 and was re-sent as
attempt 1 again -- a receiver then takes the re-delivery for the first try.
The dead node is simulated by its leftovers: rows it held whose lease
expired.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from cronman.callbacks.recording import RecordingTarget
from cronman.coordination.memory import InProcessCoordinator
from cronman.ids import run_id_for
from cronman.models import Run
from cronman.store import open_store
from cronman.timeutil import utcnow
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


def left_behind(job_id: str, seconds_ago: int, *, origin: str, attempt: int,
                status: str = "claimed", started: bool = False) -> Run:
    """A run the dead node held, its lease expired; as the row shows it."""
    now = utcnow()
    t = now.replace(microsecond=0) - timedelta(seconds=seconds_ago)
    return Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status=status,
               attempt=attempt, node_id="dead", claimed_at=t, origin=origin,
               started_at=t if started else None, lease_expires_at=now - timedelta(seconds=1))


@pytest.mark.parametrize("available", [True, False], ids=["coordinator", "no-coordinator"])
def test_a_run_sent_before_its_start_was_written_is_sent_as_a_later_attempt(store, available):
    coordinator = InProcessCoordinator(ttl=2.0)
    coordinator.set_available(available)
    (job,) = store.jobs.create_jobs([never()])
    rows = {
        # Requested runs the dead node had taken (and perhaps sent): attempt 0.
        "triggered": left_behind(job.id, 30, origin="trigger", attempt=0),
        "backfilled": left_behind(job.id, 29, origin="backfill", attempt=0),
        "upstream": left_behind(job.id, 28, origin="upstream", attempt=0),
        # Started through the row (Redis was down), the attempt not written yet.
        "row_started": left_behind(job.id, 27, origin="trigger", attempt=0, status="running",
                                   started=True),
        # A fire of the schedule, claimed as attempt 1.
        "scheduled": left_behind(job.id, 26, origin="schedule", attempt=1),
        "retried": left_behind(job.id, 25, origin="schedule", attempt=2, status="running",
                               started=True),
    }
    store.runs.claim_runs(list(rows.values()))
    target = RecordingTarget("http")

    def settled() -> bool:
        return all(store.runs.get_run(r.id).status == "succeeded" for r in rows.values())

    sweep(store, coordinator, target, settled)
    sent = {d.run_id: d.attempt for d in target.deliveries}
    want = {"triggered": 2, "backfilled": 2, "upstream": 2, "row_started": 2, "scheduled": 2,
            "retried": 3}
    assert {name: sent.get(r.id) for name, r in rows.items()} == want
    assert len(target.deliveries) == len(rows)
    assert {name: store.runs.get_run(r.id).attempt for name, r in rows.items()} == want
