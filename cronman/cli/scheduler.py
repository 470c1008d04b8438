"""``cronman scheduler`` (one node of the cluster) and ``cronman standalone``
(API + one node on SQLite, in one process)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli
from cronman.cli.schema_wait import wait_for_schema
from cronman.config import Settings

if TYPE_CHECKING:
    pass

log = logging.getLogger("cronman.scheduler")

def setup_logging(level: str) -> None:
    """Text or JSON (CRONMAN_LOG_FORMAT) to stderr; libraries held at WARNING
    (the embedded API server's access log would drown the node's lines)."""
    from cronman.observability import logs

    try:
        logs.configure(level)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@cli.command("scheduler")
@click.option("--node-id", default=None, help="node identity [env CRONMAN_NODE_ID; hostname-pid]")
@click.option("--database-url", default=None, help="SQLAlchemy URL [env CRONMAN_DATABASE_URL]")
@click.option("--redis-url", default=None,
              help="redis:// URL(s), comma-separated, or redis+sentinel:// [env CRONMAN_REDIS_URL]")
@click.option("--metrics-port", type=int, default=None,
              help="serve Prometheus /metrics on this port (off by default)")
@click.option("--metrics-host", default="0.0.0.0", show_default=True,
              help="address the metrics server listens on")
@click.option("--log-level", default="info", show_default=True)
def scheduler(node_id: str | None, database_url: str | None, redis_url: str | None,
              metrics_port: int | None, metrics_host: str, log_level: str) -> None:
    """Run one scheduler node until SIGTERM/SIGINT."""
    setup_logging(log_level)
    try:
        settings = Settings.from_env({"node_id": node_id, "database_url": database_url,
                                      "redis_url": redis_url})
    except ValueError as exc:
        click.echo(f"cronman scheduler: {exc}", err=True)
        sys.exit(RET_ERROR)
    _log_as_node(settings.node_id)
    wait_for_schema(settings.database_url, "cronman scheduler")

    from cronman.processes.scheduler import run_scheduler

    run_scheduler(settings, metrics_port=metrics_port, metrics_host=metrics_host)


@cli.command("standalone")
@click.option("--database-url", default=None,
              help="SQLAlchemy URL [env CRONMAN_DATABASE_URL; sqlite:///cronman.db]")
@click.option("--bind", default=None, help="HOST:PORT of the API [env CRONMAN_API_BIND; "
                                           "127.0.0.1:8080]")
@click.option("--node-id", default=None, help="node identity [env CRONMAN_NODE_ID]")
@click.option("--log-level", default="info", show_default=True)
def standalone(database_url: str | None, bind: str | None, node_id: str | None,
               log_level: str) -> None:
    """API + one scheduler node on SQLite, in one process, no Redis."""
    from cronman.processes.standalone import Standalone, standalone_settings

    setup_logging(log_level)
    try:
        settings = standalone_settings({"database_url": database_url, "api_bind": bind,
                                        "node_id": node_id})
    except ValueError as exc:
        click.echo(f"cronman standalone: {exc}", err=True)
        sys.exit(RET_ERROR)
    _log_as_node(settings.node_id)
    try:
        Standalone(settings).run()
    except OSError as exc:  # the port is taken, the database file cannot be opened...
        click.echo(f"cronman standalone: {exc}", err=True)
        sys.exit(RET_UNAVAILABLE)


def _log_as_node(node_id: str) -> None:
    from cronman.observability import logs

    logs.set_process_fields(node_id=node_id)
