"""The change feed: job ids announced by writers, heard by schedulers.

PostgreSQL: writers ``NOTIFY cronman_changes`` inside their transaction (so
the announcement is delivered at commit, never for a rolled-back write), and
each feed ``LISTEN``s on a dedicated psycopg2 connection outside the pool
(to the primary, through ``cronman.store.connect``: after a failover it
reconnects to the new one).
Payloads are comma-separated ids, split so that none exceeds PostgreSQL's
8000-byte limit (a bulk create of 1000 jobs sends five notifications).

SQLite: one in-process ``LocalHub`` per Store; every feed of that Store gets
what its writers publish after their commit. Other processes on the same
file hear nothing: they rely on polling ``jobs_changed_since``.

Delivery is best effort on both: a feed whose connection broke reconnects on
the next ``wait`` and whatever was announced meanwhile is only found by the
poll. Each ``wait`` returns the ids in announcement order, without duplicates.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg2
import psycopg2.extensions
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from cronman.store.connect import KEEPALIVES, libpq_params

log = logging.getLogger(__name__)

CHANNEL = "cronman_changes"
MAX_PAYLOAD_BYTES = 7900  # PostgreSQL refuses payloads of 8000 bytes or more
MAX_PENDING = 100_000  # per local feed; older ids are dropped beyond this (the poll covers them)
RECONNECT_PAUSE = 1.0

_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def _unique(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def split_payloads(ids: Sequence[str], limit: int = MAX_PAYLOAD_BYTES) -> list[str]:
    """Comma-joined chunks of ``ids``, each at most ``limit`` bytes."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for item in _unique(ids):
        n = len(item.encode()) + (1 if current else 0)
        if current and size + n > limit:
            chunks.append(",".join(current))
            current, size = [], 0
            n = len(item.encode())
        current.append(item)
        size += n
    if current:
        chunks.append(",".join(current))
    return chunks


class LocalFeed:
    """One consumer's subscription to a ``LocalHub``."""

    def __init__(self, hub: LocalHub) -> None:
        self._hub = hub
        self._cond = threading.Condition()
        self._pending: list[str] = []
        self._closed = False

    def _push(self, ids: Sequence[str]) -> None:
        with self._cond:
            self._pending.extend(ids)
            if len(self._pending) > MAX_PENDING:
                del self._pending[: len(self._pending) - MAX_PENDING]
            self._cond.notify_all()

    def wait(self, timeout: float) -> list[str]:
        with self._cond:
            if not self._pending and not self._closed:
                self._cond.wait_for(lambda: self._pending or self._closed, max(timeout, 0.0))
            ids, self._pending = self._pending, []
        return _unique(ids)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._hub._remove(self)


class LocalHub:
    """In-process announcements (SQLite): published after the writer's commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._feeds: weakref.WeakSet[LocalFeed] = weakref.WeakSet()

    def in_transaction(self, conn: Connection, ids: Sequence[str]) -> None:
        pass

    def committed(self, ids: Sequence[str]) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed._push(ids)

    def subscribe(self) -> LocalFeed:
        feed = LocalFeed(self)
        with self._lock:
            self._feeds.add(feed)
        return feed

    def _remove(self, feed: LocalFeed) -> None:
        with self._lock:
            self._feeds.discard(feed)

    def close(self) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed.close()


class PgFeed:
    """LISTEN on a dedicated connection; ``close`` wakes a blocked ``wait``."""

    def __init__(self, connect_args: tuple[Sequence[Any], dict[str, Any]],
                 channel: str = CHANNEL) -> None:
        self._connect_args = connect_args
        self._channel = channel
        self._conn: Any = None
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._lock = threading.Lock()
        self._connect()

    def _connect(self) -> bool:
        args, kwargs = self._connect_args
        try:
            conn = psycopg2.connect(*args, **kwargs)
            conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
            with conn.cursor() as cur:
                cur.execute(f'LISTEN "{self._channel}"')
        except psycopg2.Error as exc:
            log.warning("change feed: cannot listen (%s); retrying", str(exc).strip())
            return False
        self._conn = conn
        return True

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None

    def wait(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._lock:
            while not self._closed:
                if self._conn is None and not self._connect():
                    self._sleep(min(RECONNECT_PAUSE, deadline - time.monotonic()))
                    if time.monotonic() >= deadline:
                        return []
                    continue
                try:
                    self._conn.poll()
                except psycopg2.Error as exc:
                    log.warning("change feed: connection lost (%s)", str(exc).strip())
                    self._drop_connection()
                    continue
                if self._conn.notifies:
                    ids: list[str] = []
                    for note in self._conn.notifies:
                        ids.extend(p for p in note.payload.split(",") if p)
                    self._conn.notifies.clear()
                    return _unique(ids)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._select(remaining)
        return []

    def _select(self, timeout: float) -> None:
        readable, _, _ = select.select([self._conn, self._wake_r], [], [], timeout)
        if self._wake_r in readable:
            self._drain_wake()

    def _sleep(self, timeout: float) -> None:
        if timeout > 0:
            readable, _, _ = select.select([self._wake_r], [], [], timeout)
            if readable:
                self._drain_wake()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 64):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        with self._lock:
            self._drop_connection()
            os.close(self._wake_r)
            os.close(self._wake_w)


class PgChannel:
    """PostgreSQL announcements: NOTIFY in the writing transaction, LISTEN feeds."""

    def __init__(self, engine: Engine, channel: str = CHANNEL) -> None:
        # The primary's: NOTIFY is delivered where it is committed.
        self._connect_args: tuple[Sequence[Any], dict[str, Any]] = (
            (), libpq_params(engine.url, application_name="cronman-feed", **KEEPALIVES))
        self._channel = channel
        self._feeds: weakref.WeakSet[PgFeed] = weakref.WeakSet()
        self._lock = threading.Lock()

    def in_transaction(self, conn: Connection, ids: Sequence[str]) -> None:
        for payload in split_payloads(ids):
            conn.execute(_NOTIFY, {"channel": self._channel, "payload": payload})

    def committed(self, ids: Sequence[str]) -> None:
        pass

    def subscribe(self) -> PgFeed:
        feed = PgFeed(self._connect_args, self._channel)
        with self._lock:
            self._feeds.add(feed)
        return feed

    def close(self) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed.close()
