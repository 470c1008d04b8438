"""The node's job sync against a real (SQLite) store: what its first load
and the polls after it see of changes committed while the load ran."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from cronman.scheduler.jobs import sync as sync_module
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.jobs.sync import JobSync
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.store_data import job_spec


class _Events:
    """The sync's ``JobEvents``, heard by nobody."""

    def table_changed(self) -> None:
        pass

    def runs_requested(self) -> None:
        pass

    def announced(self, item: str) -> None:
        pass


class _ChangedWhileLoading:
    """The store's jobs, whose first-load iterator commits two changes after
    its first page: one to a job already read, then one to a job still
    ahead -- the later page carries the larger change_seq."""

    def __init__(self, jobs: Any, first: str, second: str) -> None:
        self._jobs = jobs
        self._first, self._second = first, second

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jobs, name)

    def iter_live_job_rows(self, batch_size: int = 10_000) -> Iterator[list[Any]]:
        pages = self._jobs.iter_live_job_rows(batch_size)
        yield next(pages)
        self._jobs.update_job(self._first, {"paused": True})
        self._jobs.update_job(self._second, {"paused": True})
        yield from pages


def test_a_change_committed_during_the_first_load_is_read_by_the_next_poll(tmp_path,
                                                                         monkeypatch):
    """The load reads a job, the job changes, a job read later changes after
    it: the polls start from the change_seq read before the load, not from
    the largest one the load saw, so the first job's change is not skipped."""
    url = f"sqlite:///{tmp_path / 'sync.db'}"
    upgrade(url)
    store = open_store(url)
    monkeypatch.setattr(sync_module, "LOAD_BATCH", 1)
    try:
        made = store.jobs.create_jobs([job_spec(f"j{i}", schedule={"kind": "interval",
                                                                   "every": 60})
                                       for i in range(2)])
        first, second = sorted(j.id for j in made)  # the SQLite load pages by id
        table = JobTable("n1", 1)
        life = Lifecycle()
        pool = Pool("test", 1)
        sync = JobSync(table, _ChangedWhileLoading(store.jobs, first, second),
                       store.feed, poll_interval=60.0, clock=ReferenceClock(), pool=pool,
                       lifecycle=life, metrics=NodeMetrics(registry=None),
                       events=_Events())

        async def load_then_poll() -> None:
            await sync.initial_load()
            assert not table.jobs[first].paused  # as the load read it
            assert table.jobs[second].paused
            await sync._poll_changes()

        try:
            asyncio.run(load_then_poll())
        finally:
            pool.shutdown()
        assert table.jobs[first].paused
    finally:
        store.close()

