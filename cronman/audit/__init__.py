"""The audit trail's export side: PostgreSQL's change stream to Parquet objects.

``cronman audit export`` reads the ``jobs``, ``job_history`` and
``scheduled_jobs`` tables' changes through a logical replication slot
(``pgoutput``, publication with ``publish_via_partition_root`` so the daily
run partitions report as ``scheduled_jobs``) and writes them as Parquet
objects partitioned by table and hour of commit, to S3-compatible storage or
a local directory. The slot is advanced only after a batch's objects are
durably written; a batch's manifest, written before its objects, fixes its
range so that a restarted exporter writes exactly the same objects again.

Modules: ``settings`` (configuration), ``pgoutput`` (the message decoder),
``columns`` (PostgreSQL text values to Arrow columns), ``batches`` (a batch
of transactions to Parquet objects), ``sinks`` (local directory, S3),
``manifests``, ``slot`` (publication, slot, peek and advance, lag),
``leader`` (one exporter per cluster), ``exporter`` (the loop), ``query``
(DuckDB over the objects).
"""
