"""Prometheus metrics of the audit exporter (``cronman audit export --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EXPORTED_CHANGES = Counter("cronman_audit_exported_changes", "Row changes exported", ["table"])
EXPORTED_OBJECTS = Counter("cronman_audit_exported_objects", "Parquet objects written")
BATCHES = Counter("cronman_audit_batches", "Batches exported (slot advanced)",
                  ["kind"])  # new | resumed (its manifest was there: a restart)
EXPORT_LAG = Histogram("cronman_audit_export_lag_seconds",
                       "From a transaction's commit to its objects being stored",
                       buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300,
                                900, 3600))
LAST_EXPORTED_COMMIT = Gauge("cronman_audit_last_exported_commit_timestamp_seconds",
                             "Commit time of the last exported transaction")
LEADER = Gauge("cronman_audit_leader", "1 while this exporter is the active one")
SLOT_LAG = Gauge("cronman_audit_slot_lag_bytes",
                 "WAL written since the slot's confirmed position")
SLOT_RETAINED = Gauge("cronman_audit_slot_retained_wal_bytes",
                      "WAL the slot keeps on the database's disk")
SLOT_SAFE = Gauge("cronman_audit_slot_safe_wal_size_bytes",
                  "WAL that may still be written before max_slot_wal_keep_size drops "
                  "the slot (-1: no limit)")
SLOT_WARNING = Gauge("cronman_audit_slot_warning", "1 while the slot's lag is over the "
                     "warning threshold")
GAPS = Counter("cronman_audit_gaps", "Breaks in the trail: the slot was made anew where "
               "batches had been exported (a failover to a member without it); each is "
               "recorded under _gaps/ in the export")
ERRORS = Counter("cronman_audit_errors", "Export attempts that failed and were retried",
                 ["kind"])
