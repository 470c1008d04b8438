"""The exclusion calendars a node holds, in memory (a ``CalendarLookup``).

Every calendar is read at start (before the node claims anything), again
when the change feed announces a change (``*calendars``), and, as a safety
net, whenever a cheap fingerprint (count, latest change) read every few
seconds says one changed. Lookups happen on the event loop and cost no I/O.
A job naming a calendar that does not exist (deleted by force) has nothing
excluded by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from cronman.errors import StoreUnavailable
from cronman.models import Job
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.schedules.calendars import ExclusionCalendar, reference_key
from cronman.store.base import CalendarStore

log = logging.getLogger(__name__)


class CalendarBook:
    """Calendars by (namespace, name), kept current."""

    def __init__(self, store: CalendarStore, *, pool: Pool, lifecycle: Lifecycle,
                 poll_interval: float) -> None:
        self._store = store
        self._pool = pool
        self._lifecycle = lifecycle
        self._poll = poll_interval
        self._by_key: dict[tuple[str, str], ExclusionCalendar] = {}
        self._fingerprint: tuple[int, Any] | None = None
        self._changed = asyncio.Event()
        self._ratelog = RateLimitedLog(log)

    def excluding(self, job: Job, fire_ms: int) -> str | None:
        for ref in job.calendars or ():
            calendar = self._by_key.get(reference_key(ref, job.namespace))
            if calendar is not None and calendar.excludes(fire_ms):
                return ref
        return None

    def kick(self) -> None:
        """A calendar changed (announced): read them again."""
        self._changed.set()

    async def load(self) -> None:
        """The first read, retried while the database is unreachable."""
        delay = 0.5
        while not self._lifecycle.stopping:
            try:
                await self._reload(force=True)
                return
            except StoreUnavailable as exc:
                log.error("cannot read exclusion calendars, retrying in %.1f s: %s", delay, exc)
                if await self._lifecycle.sleep(delay):
                    return
                delay = min(10.0, delay * 2)

    async def run(self) -> None:
        while not self._lifecycle.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self._poll)
            forced = self._changed.is_set()
            self._changed.clear()
            if self._lifecycle.stopping:
                return
            try:
                await self._reload(force=forced)
                self._ratelog.clear("calendars")
            except StoreUnavailable as exc:
                self._ratelog.error("calendars", "cannot read exclusion calendars: %s", exc)

    async def _reload(self, *, force: bool) -> None:
        fingerprint = await self._pool(self._store.fingerprint)
        if not force and fingerprint == self._fingerprint:
            return
        records = await self._pool(self._store.all_calendars)
        book: dict[tuple[str, str], ExclusionCalendar] = {}
        for record in records:
            try:
                book[(record.namespace, record.name)] = record.calendar()
            except Exception as exc:  # a stored calendar the model refuses: never crash
                log.error("exclusion calendar %s/%s cannot be read, ignored: %s",
                          record.namespace, record.name, exc)
        self._by_key = book
        self._fingerprint = fingerprint
        log.debug("exclusion calendars loaded: %d", len(book))
