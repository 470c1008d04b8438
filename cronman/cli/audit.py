"""``cronman audit``: export the change stream to Parquet, query it, see the slot."""

from __future__ import annotations

import csv
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli
from cronman.cli.options import DAY, TIME_HELP
from cronman.cli.output import format_table
from cronman.config import Settings

DEFAULT_CACHE = Path.home() / ".cache" / "cronman-audit"


def _settings(**overrides: Any) -> Any:
    from cronman.audit.settings import AuditSettings

    try:
        return AuditSettings.from_env(overrides)
    except ValueError as exc:
        click.echo(f"cronman audit: {exc}", err=True)
        sys.exit(RET_ERROR)


@cli.group("audit")
def audit() -> None:
    """The audit trail: the database's change stream as Parquet objects."""


@audit.command("export")
@click.option("--database-url", default=None, help="PostgreSQL URL [env CRONMAN_DATABASE_URL]")
@click.option("--url", default=None, help="s3://bucket/prefix, file:///dir or a directory "
                                          "[env CRONMAN_AUDIT_URL; ./cronman-audit]")
@click.option("--s3-endpoint-url", default=None,
              help="S3-compatible endpoint [env CRONMAN_AUDIT_S3_ENDPOINT_URL]")
@click.option("--exporter-id", default=None, help="name in logs and pg_stat_activity "
                                                  "[hostname-pid]")
@click.option("--flush-seconds", type=float, default=None,
              help="seconds between batches [env CRONMAN_AUDIT_FLUSH_SECONDS; 1]")
@click.option("--metrics-port", type=int, default=None, help="serve Prometheus /metrics")
@click.option("--metrics-host", default="0.0.0.0", show_default=True)
@click.option("--log-level", default="info", show_default=True)
def export(database_url: str | None, url: str | None, s3_endpoint_url: str | None,
           exporter_id: str | None, flush_seconds: float | None, metrics_port: int | None,
           metrics_host: str, log_level: str) -> None:
    """Export (or stand by to export) until SIGTERM/SIGINT."""
    from cronman.audit.slot import AuditSetupError
    from cronman.cli.scheduler import setup_logging
    from cronman.cli.schema_wait import wait_for_schema
    from cronman.processes.audit import run_exporter

    setup_logging(log_level)
    settings = _settings(url=url, s3_endpoint_url=s3_endpoint_url, flush_seconds=flush_seconds)
    db_url = Settings.from_env({"database_url": database_url}).database_url
    if not db_url.startswith("postgres"):
        click.echo("cronman audit export: the export reads PostgreSQL's change stream; "
                   "CRONMAN_DATABASE_URL is not a PostgreSQL URL", err=True)
        sys.exit(RET_ERROR)
    wait_for_schema(db_url, "cronman audit export")
    try:
        run_exporter(db_url, settings, exporter_id=exporter_id, metrics_port=metrics_port,
                     metrics_host=metrics_host)
    except AuditSetupError as exc:
        click.echo(f"cronman audit export: {exc}", err=True)
        sys.exit(RET_ERROR)


@audit.command("query")
@click.argument("sql")
@click.option("--url", default=None, help="where the objects are [env CRONMAN_AUDIT_URL]")
@click.option("--s3-endpoint-url", default=None)
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_CACHE, show_default=True,
              help="where a bucket's objects are fetched to")
@click.option("--since", type=DAY, default=None,
              help=f"fetch only objects of this day (UTC) and later: 2026-11-13 or {TIME_HELP}")
@click.option("--until", type=DAY, default=None,
              help=f"fetch only objects of this day (UTC) and earlier: 2026-11-13 or {TIME_HELP}")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json", "csv"]),
              default="table", show_default=True)
def query(sql: str, url: str | None, s3_endpoint_url: str | None, cache_dir: Path,
          since: date | None, until: date | None, fmt: str) -> None:
    """Run SQL (DuckDB) over the exported objects.

    Views: jobs, job_history, scheduled_jobs (= runs); one row per change,
    with cdc_op, cdc_commit_lsn, cdc_seq, cdc_commit_time, dt and hour.
    """
    import duckdb

    from cronman.audit.query import query_sink
    from cronman.audit.sinks import SinkError, open_sink

    settings = _settings(url=url, s3_endpoint_url=s3_endpoint_url)
    sink = open_sink(settings.url, s3_endpoint_url=settings.s3_endpoint_url)
    try:
        result = query_sink(sql, sink, cache_dir=cache_dir, since=since, until=until)
    except duckdb.Error as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(RET_ERROR)
    except SinkError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(RET_UNAVAILABLE)
    if fmt == "json":
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        click.echo(json.dumps(rows, indent=1, default=str, ensure_ascii=False))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(result.columns)
        writer.writerows(result.rows)
    else:
        click.echo(format_table(result.columns, result.rows))


@audit.command("status")
@click.option("--database-url", default=None, help="PostgreSQL URL [env CRONMAN_DATABASE_URL]")
def status(database_url: str | None) -> None:
    """The replication slot's lag (the same answer as GET /v1/audit)."""
    from cronman.audit.slot import AuditSetupError, connect, slot_status

    settings = _settings()
    db_url = Settings.from_env({"database_url": database_url}).database_url
    try:
        conn = connect(db_url, "cronman-audit-status")
    except AuditSetupError as exc:
        click.echo(f"cronman audit status: {exc}", err=True)
        sys.exit(RET_ERROR)
    try:
        with conn.cursor() as cur:
            answer = slot_status(cur, settings.slot, settings.slot_warn_bytes)
    finally:
        conn.close()
    click.echo(json.dumps(answer, indent=1, default=str))
