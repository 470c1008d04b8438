"""The export loop: one active exporter per cluster, batches out, slot forward.

Each step reads the transactions after the slot's confirmed position and
makes them one batch:

1. If a manifest exists for the first transaction (a previous exporter wrote
   it, then stopped before the slot moved), the batch ends where the manifest
   says; its objects are written where missing.
2. Otherwise the batch is every transaction read (up to the size limit); its
   manifest is created first (only if absent: a racing exporter's wins and is
   followed at the next step), then its objects.
3. The slot is advanced to the end of the batch's last transaction -- only now.

A kill at any point leaves the slot at the start of a batch whose manifest,
if any, fixes its range: the next exporter writes the same objects (skipping
those already there) and moves on. No change is skipped (the slot never
passes an unstored transaction) and none is stored twice (a batch's rows go
to names fixed by its range, in objects that are whole or absent).

Standby exporters wait on the advisory lock (``slot.try_lead``); the lock
goes with the active exporter's connection, so its death hands over.

The slot lives on one database server. After a failover to a member without
it (Patroni keeps it on replicas only as a permanent slot), the exporter
makes a new one, and the changes between the two are not in the trail: that
is never silent (``_check_continuity``, ``cronman.audit.gaps``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg2

from cronman.audit import metrics
from cronman.audit.batches import ObjectData, batch_objects
from cronman.audit.gaps import Gap
from cronman.audit.manifests import MANIFEST_DIR, Manifest, manifest_key
from cronman.audit.pgoutput import Transaction, format_lsn
from cronman.audit.settings import AUDITED_TABLES, AuditSettings
from cronman.audit.sinks import ObjectSink, SinkError
from cronman.audit.slot import (
    AuditSetupError,
    ChangeSlot,
    Peeked,
    connect,
    slot_status,
    try_lead,
)
from cronman.timeutil import format_rfc3339, utcnow

log = logging.getLogger(__name__)

STATUS_INTERVAL = 10.0
WARN_INTERVAL = 60.0
RETRY_DELAY = 2.0


class ManifestMismatch(RuntimeError):
    """A batch read again does not give the objects its manifest lists."""


@dataclass(frozen=True)
class BatchResult:
    transactions: int
    changes: int
    objects: int
    resumed: bool
    end_lsn: int


class Exporter:
    """Exports one database's audited changes to one sink (see the module doc)."""

    def __init__(self, database_url: str, settings: AuditSettings, sink: ObjectSink, *,
                 exporter_id: str, on_batch: Callable[[BatchResult], None] | None = None
                 ) -> None:
        self.database_url = database_url
        self.settings = settings
        self.sink = sink
        self.exporter_id = exporter_id
        self.on_batch = on_batch
        self._last_status = 0.0
        self._last_warning = 0.0

    # -- the process loop ------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Lead or stand by, export while leading, until ``stop`` is set."""
        while not stop.is_set():
            conn = None
            try:
                conn = connect(self.database_url, f"cronman-audit:{self.exporter_id}")
                slot = ChangeSlot(conn, self.settings.slot, self.settings.publication,
                                  AUDITED_TABLES)
                if not self._wait_for_lead(conn, slot, stop):
                    return
                metrics.LEADER.set(1)
                if slot.ensure():
                    self._check_continuity(slot)
                log.info("exporting %s (slot %s) to %s", ", ".join(AUDITED_TABLES),
                         self.settings.slot, self.sink.describe())
                while not stop.is_set():
                    self._report_status(slot)
                    result = self.step(slot)
                    if result is None or not result.transactions:
                        stop.wait(self.settings.flush_seconds)
            except AuditSetupError:
                raise
            except psycopg2.Error as exc:
                metrics.ERRORS.labels("database").inc()
                log.warning("audit export: database error, retrying: %s",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                stop.wait(RETRY_DELAY)
            except SinkError as exc:
                metrics.ERRORS.labels("storage").inc()
                log.warning("audit export: storage error, retrying: %s", exc)
                stop.wait(RETRY_DELAY)
            finally:
                metrics.LEADER.set(0)
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg2.Error:
                        pass

    def _wait_for_lead(self, conn: psycopg2.extensions.connection, slot: ChangeSlot,
                       stop: threading.Event) -> bool:
        announced = False
        while not stop.is_set():
            if try_lead(conn):
                log.info("audit exporter %s is the active exporter", self.exporter_id)
                return True
            if not announced:
                log.info("audit exporter %s is standing by (another exporter is active)",
                         self.exporter_id)
                announced = True
            self._report_status(slot)
            stop.wait(self.settings.lock_retry_seconds)
        return False

    def _check_continuity(self, slot: ChangeSlot) -> Gap | None:
        """A slot made now, where batches were exported before, starts somewhere
        else than the export stopped: the old slot is not on this server (a
        failover to a member that did not have it, or it was dropped). What lies
        between is not in the export: said in a ``_gaps/`` record, an error and
        ``cronman_audit_gaps``, before anything is exported from the new slot."""
        keys = list(self.sink.keys(f"{MANIFEST_DIR}/"))
        if not keys:
            return None  # the first export: the trail starts at the new slot
        last = Manifest.from_bytes(self.sink.get(max(keys)) or b"")
        gap = Gap(slot=self.settings.slot, from_lsn=last.end_lsn, to_lsn=slot.confirmed_lsn(),
                  last_exported_commit_lsn=last.last_commit_lsn, exporter=self.exporter_id,
                  detected_at=format_rfc3339(utcnow()) or "")
        self.sink.put_if_absent(gap.key, gap.to_bytes())
        metrics.GAPS.inc()
        log.error("audit export: GAP in the trail: %s", gap.describe())
        return gap

    def _report_status(self, slot: ChangeSlot) -> None:
        now = time.monotonic()
        if now - self._last_status < STATUS_INTERVAL:
            return
        self._last_status = now
        with slot.conn.cursor() as cur:
            status = slot_status(cur, self.settings.slot, self.settings.slot_warn_bytes)
        if not status["exists"]:
            return
        metrics.SLOT_LAG.set(status["lag_bytes"] or 0)
        metrics.SLOT_RETAINED.set(status["retained_wal_bytes"] or 0)
        safe = status["safe_wal_size"]
        metrics.SLOT_SAFE.set(-1 if safe is None else safe)
        metrics.SLOT_WARNING.set(1 if status["warning"] else 0)
        if status["warning"] and now - self._last_warning >= WARN_INTERVAL:
            self._last_warning = now
            log.warning("audit slot %s: %s (see max_slot_wal_keep_size in the README)",
                        status["slot"], status["warning"])

    # -- one batch -------------------------------------------------------------

    def step(self, slot: ChangeSlot) -> BatchResult | None:
        """Export the next batch; None when there was nothing to export."""
        peeked = slot.peek(max_changes=self.settings.batch_changes)
        if not peeked.transactions:
            self._advance_idle(slot, peeked)
            return None
        first = peeked.transactions[0]
        mkey = manifest_key(first.commit_lsn)
        existing = self.sink.get(mkey)
        if existing is not None:
            return self._resume(slot, peeked, Manifest.from_bytes(existing))
        txns = peeked.transactions
        objects = batch_objects(txns, AUDITED_TABLES)
        manifest = Manifest(
            first_commit_lsn=first.commit_lsn, last_commit_lsn=txns[-1].commit_lsn,
            end_lsn=txns[-1].end_lsn, transactions=len(txns),
            changes=sum(o.changes for o in objects), objects=tuple(o.key for o in objects),
            exporter=self.exporter_id, created_at=format_rfc3339(utcnow()) or "")
        if not self.sink.put_if_absent(mkey, manifest.to_bytes()):
            log.info("batch at %s: another exporter wrote its manifest first; following it",
                     format_lsn(first.commit_lsn))
            return None
        for obj in objects:
            self.sink.put(obj.key, obj.body)
        end = txns[-1].end_lsn
        if peeked.complete and peeked.flushed_lsn > end:
            end = peeked.flushed_lsn  # nothing else committed before it: skip idle WAL too
        return self._finish(slot, txns, objects, end, resumed=False)

    def _resume(self, slot: ChangeSlot, peeked: Peeked, manifest: Manifest) -> BatchResult:
        txns = [t for t in peeked.transactions if t.commit_lsn <= manifest.last_commit_lsn]
        if txns[-1].commit_lsn != manifest.last_commit_lsn:
            txns = slot.peek(upto_lsn=manifest.end_lsn).transactions
        if (len(txns) != manifest.transactions
                or txns[-1].commit_lsn != manifest.last_commit_lsn):
            raise ManifestMismatch(
                f"batch {format_lsn(manifest.first_commit_lsn)}: read "
                f"{len(txns)} transactions, the manifest lists {manifest.transactions}")
        objects = batch_objects(txns, AUDITED_TABLES)
        if tuple(o.key for o in objects) != manifest.objects:
            raise ManifestMismatch(f"batch {format_lsn(manifest.first_commit_lsn)}: objects "
                                   f"{[o.key for o in objects]} differ from its manifest's")
        missing = [o for o in objects if not self.sink.exists(o.key)]
        for obj in missing:
            self.sink.put(obj.key, obj.body)
        log.info("batch %s-%s resumed from its manifest (%d of %d objects were missing)",
                 format_lsn(manifest.first_commit_lsn), format_lsn(manifest.last_commit_lsn),
                 len(missing), len(objects))
        return self._finish(slot, txns, objects, manifest.end_lsn, resumed=True)

    def _finish(self, slot: ChangeSlot, txns: list[Transaction], objects: list[ObjectData],
                end_lsn: int, *, resumed: bool) -> BatchResult:
        stored = utcnow()
        slot.advance(end_lsn)
        for txn in txns:
            metrics.EXPORT_LAG.observe(max(0.0, (stored - txn.commit_time).total_seconds()))
        metrics.LAST_EXPORTED_COMMIT.set(txns[-1].commit_time.timestamp())
        for obj in objects:
            metrics.EXPORTED_CHANGES.labels(obj.table).inc(obj.changes)
        metrics.EXPORTED_OBJECTS.inc(len(objects))
        metrics.BATCHES.labels("resumed" if resumed else "new").inc()
        result = BatchResult(len(txns), sum(o.changes for o in objects), len(objects),
                             resumed, end_lsn)
        log.debug("batch %s: %d transactions, %d changes, %d objects",
                  format_lsn(txns[0].commit_lsn), result.transactions, result.changes,
                  result.objects)
        if self.on_batch is not None:
            self.on_batch(result)
        return result

    def _advance_idle(self, slot: ChangeSlot, peeked: Peeked) -> None:
        """Nothing to export: move the slot over WAL that holds no audited change,
        so an idle export does not keep WAL on the database's disk."""
        if peeked.complete and peeked.flushed_lsn > slot.confirmed_lsn():
            slot.advance(peeked.flushed_lsn)
