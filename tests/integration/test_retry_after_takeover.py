"""A node whose run a sweeper took over while it waited for a retry does not
send that retry (the chaos suite saw a receiver partition on a loaded
machine end with the same run's attempt 3 sent twice: once by the node that
held it, once by the sweeper that took it from a node it believed gone).

Before each retry the node renews the run's lease by compare-and-set; a row
no longer its own stops the run here. On a real PostgreSQL store, with the
in-process coordinator; the "sweeper" is another node's take-over of the
row through the store, made right before the retry falls due. Without the
check the retry goes out whenever the node's lease renewal (every third of
a lease) has not come round since the takeover: in most runs of this test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronman.callbacks.base import Outcome
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
def store() -> Iterator[Any]:
    with migrated_pg_database("cronman_retry") as url:
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


def left_behind(job_id: str, seconds_ago: int) -> Run:
    now = utcnow()
    t = now.replace(microsecond=0) - timedelta(seconds=seconds_ago)
    return Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="running",
               attempt=1, node_id="dead", claimed_at=t, started_at=t,
               lease_expires_at=now - timedelta(seconds=1))


@pytest.mark.parametrize("stolen", [True, False], ids=["taken-over", "still-held"])
def test_a_retry_is_sent_only_while_the_node_holds_the_run(store, stolen):
    (job,) = store.jobs.create_jobs([never(retry={"max_attempts": 3, "min_backoff": 2,
                                                   "max_backoff": 2})])
    run = left_behind(job.id, 20)
    store.runs.claim_runs([run])
    target = RecordingTarget("http")
    target.script(Outcome(ok=False, error="HTTP 503", result={"http_status": 503}))
    state: dict[str, float] = {}

    def until() -> bool:
        if target.records and "failed_at" not in state:
            state["failed_at"] = time.monotonic()
        since = time.monotonic() - state.get("failed_at", time.monotonic())
        if stolen and since >= 1.8 and "stolen" not in state:
            # Another node's sweeper takes the row right before the retry is
            # due (2 s after the failure): sooner than the node's lease
            # renewal (every second) notices, most of the time.
            state["stolen"] = since
            far = utcnow() + timedelta(hours=1)
            taken = store.runs.take_expired_runs("thief", far, far, 10)
            assert [r.id for r in taken] == [run.id]
        return "failed_at" in state and (since > 4.0 or len(target.records) >= 2)

    sweep(store, InProcessCoordinator(ttl=2.0), target, until)
    sent = [(d.run_id, d.attempt) for d in target.deliveries]
    if stolen:
        assert sent == [(run.id, 2)]  # the retry, attempt 3, is the thief's to send
        assert store.runs.get_run(run.id).node_id == "thief"
    else:
        assert sent == [(run.id, 2), (run.id, 3)]
