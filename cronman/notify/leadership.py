"""One active notifier per cluster.

On PostgreSQL every scheduler node runs a notifier; the one holding a
session-level advisory lock on its own connection (to the primary, made by
``cronman.store.connect``; after a failover the lock is taken again on the
new primary) is active, the others try
again every few seconds. The lock goes with the connection: a node that dies
(or loses the database) hands over as soon as PostgreSQL sees its session
end (TCP keepalives bound that to ~25 s for a host that vanishes; a killed
process closes at once). The active notifier checks its connection before
each step and stops acting when it is gone. Whatever two notifiers might
both do during a handover is fenced in the database: events are unique per
rule, runs are marked read in the transaction that stores their events, and
messages are taken for sending with ``FOR UPDATE SKIP LOCKED``.

SQLite (``cronman standalone``) has one node: it is always the notifier.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import psycopg2

from cronman.store.connect import connect, normalise_url

log = logging.getLogger(__name__)

# pg_try_advisory_lock key of the active notifier ("cmntfy").
NOTIFIER_LOCK_KEY = 0x636D_6E74_6679


class Leadership(Protocol):
    """Blocking calls (run them off the event loop)."""

    def acquire(self) -> bool:
        """Try to become (or stay) the active notifier."""

    def holds(self) -> bool:
        """Whether this process still is the active notifier."""

    def release(self) -> None: ...


class SoloLeadership:
    """A single-node deployment: always the notifier."""

    def acquire(self) -> bool:
        return True

    def holds(self) -> bool:
        return True

    def release(self) -> None:
        pass


class PgLeadership:
    """The advisory lock on a connection of its own (see the module doc)."""

    def __init__(self, database_url: str, node_id: str) -> None:
        self._url = normalise_url(database_url)
        self._name = f"cronman-notifier:{node_id}"[:63]
        self._conn: Any = None
        self._held = False

    def acquire(self) -> bool:
        if self._held and self.holds():
            return True
        try:
            if self._conn is None:
                self._conn = connect(self._url, self._name)
            with self._conn.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (NOTIFIER_LOCK_KEY,))
                self._held = bool(cur.fetchone()[0])
        except psycopg2.Error as exc:
            log.warning("notifier: cannot reach the database for the lock: %s",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            self._drop()
        return self._held

    def holds(self) -> bool:
        if not self._held or self._conn is None:
            return False
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()
        except psycopg2.Error:
            log.warning("notifier: the connection holding the lock is gone; standing down")
            self._drop()
        return self._held

    def release(self) -> None:
        self._drop()

    def _drop(self) -> None:
        self._held = False
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # the session ends: the lock goes with it
            except psycopg2.Error:
                pass


def leadership_for(database_url: str, node_id: str) -> Leadership:
    if normalise_url(database_url).get_backend_name() == "postgresql":
        return PgLeadership(database_url, node_id)
    return SoloLeadership()
