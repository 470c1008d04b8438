"""The order in which a dispatcher starts runs that are due already (a node
that is behind): highest priority first, a few hundred per loop turn, and a
timer that falls due meanwhile is not kept waiting for the whole backlog."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.models import Job
from cronman.scheduler.dispatch.dispatcher import Dispatcher
from cronman.scheduler.dispatch.duequeue import DUE_PER_TURN
from cronman.scheduler.fires import ActiveRun, Fire
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.store_data import job_spec

BACKLOG = 5000


class NoneHeld:
    """A job table that holds none of the jobs: every claimed fire goes."""

    def held_version(self, job_id: str) -> tuple[int, bool] | None:
        return None

    def is_deleted(self, job_id: str) -> bool:
        return False

    def held_job(self, job_id: str) -> Job | None:
        return None


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    s = open_store(url)
    yield s
    s.close()


def test_a_backlog_starts_by_priority_and_lets_timers_through(store) -> None:
    low, high, timed = store.jobs.create_jobs([
        job_spec("low"), job_spec("high", priority=10), job_spec("timed")])
    target = RecordingTarget("http")
    clock = ReferenceClock()
    metrics = NodeMetrics(CollectorRegistry())

    async def main() -> list[str]:
        with ThreadPoolExecutor(1) as pool:
            writer = ResultWriter(store.runs, pool, metrics, node_id="n1", clock=clock)
            d = Dispatcher(node_id="n1", targets=TargetRegistry([target]), writer=writer,
                           metrics=metrics, clock=clock, max_in_flight=10 * BACKLOG,
                           lease_seconds=30.0, jobs=NoneHeld())
            now = clock.now_ms()

            def run(job: Job, due_ms: int) -> ActiveRun:
                return ActiveRun.of_fire(Fire(job=job, fire_ms=due_ms, due_ms=due_ms))

            for i in range(BACKLOG):  # overdue, oldest first
                d.add(run(low, now - 60_000 + i * 10))
            d.add(run(high, now - 1000))  # overdue too, handed over last
            # Falls due while the backlog goes out (it takes well over 10 ms).
            d.add(run(timed, clock.now_ms() + 10))
            await target.wait_for(BACKLOG + 2, timeout=30)
        return [r.delivery.job_id for r in target.records]

    order = asyncio.run(main())
    assert order[0] == high.id
    # The timer's run went out after a few turns' share of the backlog, not
    # after all of it (as it would if the whole backlog went in one turn).
    assert order.index(timed.id) < BACKLOG - DUE_PER_TURN
    assert order.count(low.id) == BACKLOG
