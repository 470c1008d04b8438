"""Waking claims that wait for work (the long-poll of ``POST /v1/queues/{queue}/claim``).

A claim registers as a waiter of its (namespace, queue) before its first
look at the queue (``waiting``). Each enqueue is announced: on PostgreSQL
with ``NOTIFY cronman_work`` in the enqueue's transaction (so at commit),
heard by one listener thread per process (started by the first waiter); on
SQLite in-process. Each announcement gives one ticket to the queue's
waiters of this process (never more tickets than waiters), and a ticket
wakes one of them: one run enqueued sends one claim to the database per
process, not every waiting one. A waiter sleeps until it takes a ticket, or
for at most ``poll`` seconds: the poll covers what no signal reaches
(another process on one SQLite file, a listener reconnecting).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cronman.store.changes import PgFeed
from cronman.store.connect import KEEPALIVES, libpq_params
from cronman.store.dialect import notify
from cronman.store.engine import Database, Tx

log = logging.getLogger(__name__)

CHANNEL = "cronman_work"
PG_POLL = 1.0
SQLITE_POLL = 0.25
LISTEN_SLICE = 1.0


class Waiter:
    """One claim waiting on its queue (``WorkSignals.waiting``)."""

    def __init__(self, signals: WorkSignals, key: str) -> None:
        self._signals = signals
        self._key = key

    def wait(self, timeout: float) -> bool:
        """Sleep until a ticket comes (True) or ``min(timeout, poll)`` passed."""
        return self._signals._take_ticket(self._key, timeout)


class WorkSignals:
    """Waiters and tickets per queue: enqueues give tickets, claims wait for them."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.poll = PG_POLL if db.is_postgres else SQLITE_POLL
        self._cond = threading.Condition()
        self._waiters: dict[str, int] = {}
        self._tickets: dict[str, int] = {}
        self._listener: threading.Thread | None = None
        self._feed: PgFeed | None = None
        self._closed = False

    def announce(self, tx: Tx, namespace: str, queue: str) -> None:
        """Inside the enqueue's transaction: tell the waiters of the queue."""
        key = f"{namespace}/{queue}"
        notify(tx.conn, CHANNEL, key, tx.dialect)
        if not self._db.is_postgres:
            self._bump([key])

    @contextmanager
    def waiting(self, namespace: str, queue: str) -> Iterator[Waiter]:
        """A waiter of the queue for the block: what is announced from now on
        gives it (or another waiter of the queue) a ticket."""
        key = f"{namespace}/{queue}"
        self._listen()  # before the caller's look: what is enqueued after it is heard
        with self._cond:
            self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            yield Waiter(self, key)
        finally:
            with self._cond:
                left = self._waiters[key] - 1
                if left:
                    self._waiters[key] = left
                    self._tickets[key] = min(self._tickets.get(key, 0), left)
                else:
                    del self._waiters[key]
                    self._tickets.pop(key, None)

    def _take_ticket(self, key: str, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._tickets.get(key, 0) > 0 or self._closed,
                                min(timeout, self.poll))
            if self._tickets.get(key, 0) > 0:
                self._tickets[key] -= 1
                return True
            return False

    def _bump(self, keys: Sequence[str]) -> None:
        with self._cond:
            for key in keys:
                waiters = self._waiters.get(key, 0)
                if waiters:
                    self._tickets[key] = min(self._tickets.get(key, 0) + 1, waiters)
            self._cond.notify_all()

    def _listen(self) -> None:
        if not self._db.is_postgres or self._listener is not None:
            return
        with self._cond:
            if self._listener is not None or self._closed:
                return
            args: tuple[Sequence[Any], dict[str, Any]] = (
                (), libpq_params(self._db.engine.url, application_name="cronman-work",
                                 **KEEPALIVES))
            self._feed = PgFeed(args, CHANNEL)
            self._listener = threading.Thread(target=self._run, name="cronman-work-listen",
                                              daemon=True)
            self._listener.start()

    def _run(self) -> None:
        feed = self._feed
        assert feed is not None
        while not self._closed:
            try:
                keys = feed.wait(LISTEN_SLICE)
            except Exception:  # keep listening: the poll covers the gap
                log.exception("work queue listener failed; listening again")
                continue
            if keys:
                self._bump(keys)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._feed is not None:
            self._feed.close()
