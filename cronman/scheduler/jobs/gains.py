"""Jobs prepared ahead of an expected gain.

When exactly one other member has missed heartbeats, its departure is likely:
the jobs it would hand to this node are read and parsed now (``prepare``), so
that the gain itself is a matter of checking versions and pushing timers
(``admit``). They are forgotten when that member beats again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from cronman.errors import StoreUnavailable
from cronman.scheduler.jobs.jobstate import Prepared
from cronman.scheduler.jobs.jobtable import JobTable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Pool
from cronman.store.base import JobStore

log = logging.getLogger(__name__)

PREPARE_MAX = 250_000  # jobs prepared at most ahead of a gain (they cost memory meanwhile)
READ_CHUNK = 5000  # jobs read per query
APPLY_CHUNK = 1000  # jobs handled per loop iteration before yielding


class TableChanged(Protocol):
    def table_changed(self) -> None:
        """The job table changed: the claimer looks at its head again."""


class GainPreparer:
    """Prepares the jobs a silent member would hand over, and admits them."""

    def __init__(self, table: JobTable, jobs: JobStore, pool: Pool, clock: ReferenceClock,
                 events: TableChanged) -> None:
        self._table = table
        self._clock = clock
        self._jobs = jobs
        self._pool = pool
        self._events = events
        self._member: str | None = None  # the silent member whose jobs are prepared
        self._prepared: dict[str, Prepared] = {}

    def member_silent(self, member: str | None, members: list[str]) -> None:
        """Start preparing for ``member``; with None, forget what was prepared
        if its member is live again (not when it is gone: the gain being
        loaded consumes it)."""
        if member is None:
            if self._member is not None and self._member in members:
                self._member, self._prepared = None, {}
            return
        if member == self._member:
            return
        self._member, self._prepared = member, {}
        task = asyncio.get_running_loop().create_task(self._prepare(member))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _prepare(self, member: str) -> None:
        ids = self._table.gained_without(member)
        if not ids or len(ids) > PREPARE_MAX:
            return
        prepared: dict[str, Prepared] = {}
        try:
            for start in range(0, len(ids), READ_CHUNK):
                rows = await self._pool(self._jobs.live_job_rows, ids[start:start + READ_CHUNK])
                if self._member != member:
                    return
                for k in range(0, len(rows), APPLY_CHUNK):
                    for row in rows[k:k + APPLY_CHUNK]:
                        got = self._table.prepare_row(row)
                        if got is not None:
                            prepared[row.id] = got
                    await asyncio.sleep(0)
        except StoreUnavailable:
            return
        if self._member == member:
            self._prepared = prepared
            log.info("member %s is silent: %d jobs it would hand over are prepared",
                     member, len(prepared))

    async def admit(self, ids: list[str]) -> list[str]:
        """Hold the prepared ones of ``ids`` still current; returns the rest,
        to load."""
        ahead, self._prepared, self._member = self._prepared, {}, None
        ready = [i for i in ids if i in ahead]
        if not ready:
            return ids
        t0 = time.perf_counter()
        states = await self._pool(self._jobs.live_job_states, ready)
        t1 = time.perf_counter()
        now = self._clock.now_ms()
        rest = [i for i in ids if i not in ahead]
        for n, job_id in enumerate(ready):
            fresh = states.get(job_id)
            if fresh is None or not self._table.admit_prepared(ahead[job_id], *fresh, now):
                rest.append(job_id)
            if n % APPLY_CHUNK == APPLY_CHUNK - 1:
                await asyncio.sleep(0)
        self._events.table_changed()
        log.info("held %d prepared jobs (%.0f ms checking them, %.0f ms scheduling them); "
                 "%d to load", len(ids) - len(rest), (t1 - t0) * 1000,
                 (time.perf_counter() - t1) * 1000, len(rest))
        return rest
