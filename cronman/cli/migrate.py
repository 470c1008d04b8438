"""``cronman migrate``: bring the database schema to the newest revision.

Idempotent on both databases; on PostgreSQL it also creates the daily
partitions of the run history from today on.
"""

from __future__ import annotations

import sys

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli
from cronman.config import Settings
from cronman.errors import StoreUnavailable


@cli.command("migrate")
@click.option("--database-url", default=None, help="SQLAlchemy URL [env CRONMAN_DATABASE_URL]")
def migrate(database_url: str | None) -> None:
    """Create or upgrade the database schema (Alembic, migrations/)."""
    from cronman.store.connect import normalise_url
    from cronman.store.migrate import SchemaNotCurrent, upgrade

    settings = Settings.from_env({"database_url": database_url})
    try:
        shown = normalise_url(settings.database_url).render_as_string(hide_password=True)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(RET_ERROR)
    try:
        report = upgrade(settings.database_url, days_ahead=settings.partitions_ahead_days,
                         retention_days=settings.history_retention_days,
                         node_id=settings.node_id)
    except StoreUnavailable as exc:
        click.echo(f"error: {shown}: {exc.message}", err=True)
        sys.exit(RET_UNAVAILABLE)
    except SchemaNotCurrent as exc:
        click.echo(f"error: {shown}: {exc.message}", err=True)
        sys.exit(RET_ERROR)
    if report.changed:
        click.echo(f"{shown}: upgraded schema {report.before or '(empty)'} -> {report.after}")
    else:
        click.echo(f"{shown}: schema already at {report.after} (nothing to do)")
    if report.partitions_created:
        click.echo(f"created partitions: {', '.join(report.partitions_created)}")
