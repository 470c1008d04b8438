"""The PostgreSQL side of the export: publication, slot, reading and confirming.

- The publication names the audited tables with ``publish_via_partition_root``:
  rows of every daily partition of ``scheduled_jobs`` (those made later too,
  and the default partition) are published as ``scheduled_jobs`` rows.
- The logical slot (``pgoutput``) keeps every change from its creation on
  until it is confirmed.
- Changes are read with ``pg_logical_slot_peek_binary_changes`` (whole
  transactions, in commit order; nothing is consumed) and the slot is moved
  with ``pg_replication_slot_advance`` only after their objects are stored.
  The confirmation is an explicit statement the exporter makes: no client
  library answers keepalives with positions of its own.
- ``slot_status`` reads the slot's lag (the API's ``GET /v1/audit`` too).

The exporter's connection also holds the cluster-wide advisory lock that
makes it the one active exporter (``try_lead``): lose the connection, lose
the lock, and a standby takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions

from cronman.audit.pgoutput import PgOutputDecoder, Transaction, format_lsn, parse_lsn
from cronman.store import connect as store_connect

log = logging.getLogger(__name__)

# Advisory lock held by the active exporter ("cmaudt"); standbys try it.
EXPORT_LOCK_KEY = 0x636D_6175_6474
PGOUTPUT_PROTO = "1"


class AuditSetupError(RuntimeError):
    """The database cannot feed the export (wal_level, privileges, SQLite...)."""


def connect(database_url: str, application_name: str) -> psycopg2.extensions.connection:
    """The exporter's connection, to the primary (``cronman.store.connect``)."""
    try:
        url = store_connect.normalise_url(database_url)
    except ValueError as exc:
        raise AuditSetupError(str(exc)) from exc
    if url.get_backend_name() != "postgresql":
        raise AuditSetupError("the audit export reads PostgreSQL's change stream: "
                              "CRONMAN_DATABASE_URL must be a postgresql:// URL")
    return store_connect.connect(
        url, application_name,
        options="-c TimeZone=UTC -c DateStyle=ISO -c statement_timeout=0")


def try_lead(conn: psycopg2.extensions.connection) -> bool:
    """Take the exporter lock for this connection's session (False: another holds it)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", (EXPORT_LOCK_KEY,))
        return bool(cur.fetchone()[0])


@dataclass(frozen=True)
class Peeked:
    """Transactions read from the slot; ``complete``: every transaction that
    committed before ``flushed_lsn`` is among them (the read was not cut short)."""

    transactions: list[Transaction]
    complete: bool
    flushed_lsn: int


class ChangeSlot:
    """One logical slot and its publication, on one connection."""

    def __init__(self, conn: psycopg2.extensions.connection, slot: str, publication: str,
                 tables: Sequence[str]) -> None:
        self.conn = conn
        self.slot = slot
        self.publication = publication
        self.tables = tuple(tables)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def ensure(self) -> bool:
        """Create the publication and the slot where missing (True: the slot is new)."""
        (level,) = self._query("SHOW wal_level")[0]
        if level != "logical":
            raise AuditSetupError(f"wal_level is {level!r}: the audit export needs "
                                  "wal_level = logical (postgresql.conf; a restart)")
        self._ensure_publication()
        if self._query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                       (self.slot,)):
            return False
        try:
            self._query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                        (self.slot,))
        except psycopg2.errors.DuplicateObject:
            return False  # made by another exporter a moment ago
        log.info("created logical replication slot %s (pgoutput)", self.slot)
        return True

    def _ensure_publication(self) -> None:
        rows = self._query("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                           (self.publication,))
        tables = ", ".join(self.tables)
        if not rows:
            try:
                self._query(f"CREATE PUBLICATION {self.publication} FOR TABLE {tables} "
                            "WITH (publish_via_partition_root = true)")
                log.info("created publication %s for %s", self.publication, tables)
            except psycopg2.errors.DuplicateObject:
                pass
            return
        published = {name for (name,) in self._query(
            "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
            (self.publication,))}
        if not rows[0][0] or published != set(self.tables):
            self._query(f"ALTER PUBLICATION {self.publication} SET TABLE {tables}")
            self._query(f"ALTER PUBLICATION {self.publication} "
                        "SET (publish_via_partition_root = true)")
            log.info("publication %s set to %s (via partition root)", self.publication, tables)

    def peek(self, *, max_changes: int | None = None, upto_lsn: int | None = None) -> Peeked:
        """Whole transactions after the slot's confirmed position, in commit
        order: up to the one in which ``max_changes`` messages are reached, or
        those committed before ``upto_lsn``."""
        (flushed,) = self._query("SELECT pg_current_wal_flush_lsn()::text")[0]
        rows = self._query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes("
            "%s, %s::pg_lsn, %s, 'proto_version', %s, 'publication_names', %s)",
            (self.slot, None if upto_lsn is None else format_lsn(upto_lsn), max_changes,
             PGOUTPUT_PROTO, self.publication))
        decoder = PgOutputDecoder()
        txns = []
        for (data,) in rows:
            txn = decoder.feed(bytes(data))
            if txn is not None:
                txns.append(txn)
        complete = upto_lsn is None and (max_changes is None or len(rows) < max_changes)
        return Peeked(txns, complete, parse_lsn(flushed))

    def confirmed_lsn(self) -> int:
        rows = self._query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (self.slot,))
        if not rows or rows[0][0] is None:
            raise AuditSetupError(f"replication slot {self.slot} does not exist")
        return parse_lsn(rows[0][0])

    def advance(self, lsn: int) -> None:
        """Confirm everything before ``lsn`` (never backwards)."""
        self._query("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                    (self.slot, format_lsn(lsn)))


# -- lag ------------------------------------------------------------------------

SLOT_STATUS_SQL = """
SELECT s.slot_name, s.plugin, s.active, s.wal_status, s.safe_wal_size,
       s.confirmed_flush_lsn::text, s.restart_lsn::text, pg_current_wal_lsn()::text,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
       current_setting('max_slot_wal_keep_size'),
       (SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.database = d.oid
           AND l.classid = %(high)s AND l.objid = %(low)s AND l.objsubid = 1 LIMIT 1)
FROM pg_replication_slots s, pg_database d
WHERE s.slot_name = %(slot)s AND d.datname = current_database()
"""


def slot_status(cursor: Any, slot: str, warn_bytes: int) -> dict[str, Any]:
    """The slot's state and lag as JSON (``exists`` False when there is no slot).

    ``lag_bytes``: WAL written since the last confirmed change (what the
    export still owes); ``retained_wal_bytes``: WAL the slot keeps on the
    database's disk; ``safe_wal_size``: how much more may be written before
    ``max_slot_wal_keep_size`` invalidates the slot (null: no limit).
    ``warning`` is set when the slot holds back more than ``warn_bytes``, or
    when less than that is left before the limit.
    """
    cursor.execute(SLOT_STATUS_SQL, {"slot": slot, "high": EXPORT_LOCK_KEY >> 32,
                                     "low": EXPORT_LOCK_KEY & 0xFFFFFFFF})
    row = cursor.fetchone()
    if row is None:
        return {"slot": slot, "exists": False, "warn_bytes": warn_bytes,
                "warning": f"no replication slot {slot}: the audit export has not run"}
    (name, plugin, active, wal_status, safe, confirmed, restart, current, lag, retained,
     keep, exporter) = row
    warning = None
    if wal_status == "lost":
        warning = "the slot lost WAL it needed (max_slot_wal_keep_size): changes are missing"
    elif retained is not None and retained > warn_bytes:
        warning = (f"the slot holds {retained} bytes of WAL (over {warn_bytes}): "
                   "the export is behind or stopped")
    elif safe is not None and safe < warn_bytes:
        warning = f"{safe} bytes of WAL left before max_slot_wal_keep_size drops the slot"
    return {
        "slot": name, "exists": True, "plugin": plugin, "active": bool(active),
        "exporter": exporter, "wal_status": wal_status, "current_lsn": current,
        "confirmed_lsn": confirmed, "restart_lsn": restart, "lag_bytes": lag,
        "retained_wal_bytes": retained, "safe_wal_size": safe,
        "max_slot_wal_keep_size": keep, "warn_bytes": warn_bytes, "warning": warning,
    }
