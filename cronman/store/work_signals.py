"""Waking claims that wait for work (the long-poll of ``POST /v1/queues/{queue}/claim``).

Each enqueue bumps a counter per (namespace, queue). On PostgreSQL it is
announced with ``NOTIFY cronman_work`` in the enqueue's transaction (so at
commit), and one listener thread per process (started on the first wait)
bumps the counters of what it hears (listening from the first snapshot of
a counter, before the caller looks at the queue); on SQLite the enqueue
bumps them in-process. A waiter sleeps until its queue's counter moves past the value
it saw, or for at most ``poll`` seconds: the poll covers what no signal
reaches (another process on one SQLite file, a listener reconnecting).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
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


class WorkSignals:
    """Counters per queue, bumped by enqueues, waited on by claims."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.poll = PG_POLL if db.is_postgres else SQLITE_POLL
        self._cond = threading.Condition()
        self._counts: dict[str, int] = {}
        self._listener: threading.Thread | None = None
        self._feed: PgFeed | None = None
        self._closed = False

    def announce(self, tx: Tx, namespace: str, queue: str) -> None:
        """Inside the enqueue's transaction: tell the waiters of the queue."""
        key = f"{namespace}/{queue}"
        notify(tx.conn, CHANNEL, key, tx.dialect)
        if not self._db.is_postgres:
            self._bump([key])

    def wait(self, namespace: str, queue: str, timeout: float, seen: int | None = None) -> int:
        """The queue's counter, once it differs from ``seen`` or after
        ``min(timeout, poll)`` seconds (at once without ``seen``)."""
        key = f"{namespace}/{queue}"
        self._listen()  # before the caller's look: what is enqueued after it is heard
        if seen is None or timeout <= 0:
            with self._cond:
                return self._counts.get(key, 0)
        with self._cond:
            self._cond.wait_for(lambda: self._counts.get(key, 0) != seen or self._closed,
                                min(timeout, self.poll))
            return self._counts.get(key, 0)

    def _bump(self, keys: Sequence[str]) -> None:
        with self._cond:
            for key in keys:
                self._counts[key] = self._counts.get(key, 0) + 1
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
