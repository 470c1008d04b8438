"""``cronman api``: serve the API under gunicorn (``wsgi:app``).

Settings reach the workers through the environment (CRONMAN_*); ``--bind``
defaults to CRONMAN_API_BIND. The worker class is gthread: a request spends
most of its time waiting on the database, which threads overlap cheaply.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

import cronman
from cronman.api.gunicorn_conf import METRICS_DIR_ENV, OWNED_METRICS_DIR_ENV
from cronman.cli.group import RET_UNAVAILABLE, cli
from cronman.config import DEFAULT_API_BIND, Settings

DEFAULT_THREADS = 4
DEFAULT_TIMEOUT = 30


def default_workers() -> int:
    return 2 * (os.cpu_count() or 1)


def app_spec() -> tuple[str, str | None]:
    """``wsgi:app`` and the directory holding wsgi.py, else the factory in the package."""
    root = Path(cronman.__file__).resolve().parent.parent
    if (root / "wsgi.py").is_file():
        return "wsgi:app", str(root)
    return "cronman.api.app:create_app()", None


def gunicorn_argv(*, bind: str, workers: int, threads: int, timeout: int,
                  access_log: bool) -> list[str]:
    spec, pythonpath = app_spec()
    argv = [
        sys.executable, "-m", "gunicorn",
        "--config", "python:cronman.api.gunicorn_conf",
        "--bind", bind,
        "--workers", str(workers),
        "--worker-class", "gthread",
        "--threads", str(threads),
        "--timeout", str(timeout),
        "--graceful-timeout", "10",
        "--keep-alive", "5",
        "--name", "cronman-api",
        # One shared default control-socket path would collide between servers on a host.
        "--no-control-socket",
    ]
    if os.path.isdir("/dev/shm"):
        argv += ["--worker-tmp-dir", "/dev/shm"]
    if access_log:
        argv += ["--access-logfile", "-"]
    if pythonpath:
        argv += ["--pythonpath", pythonpath]
    argv.append(spec)
    return argv


def _check_schema(url: str) -> None:
    """Refuse to start against a database whose schema is not the current one."""
    from cronman.store.migrate import check_schema_current

    try:
        check_schema_current(url)
    except Exception as exc:
        click.echo(f"cronman api: the database is not ready: {exc}\n"
                   "run `cronman migrate` first", err=True)
        sys.exit(RET_UNAVAILABLE)


@cli.command("api")
@click.option("--bind", envvar="CRONMAN_API_BIND", default=DEFAULT_API_BIND,
              show_default=True, help="HOST:PORT to listen on [env CRONMAN_API_BIND]")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="worker processes [default: 2 x cores]")
@click.option("--threads", type=click.IntRange(min=1), default=DEFAULT_THREADS,
              show_default=True, help="threads per worker (gthread)")
@click.option("--timeout", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT,
              show_default=True, help="seconds before a stuck worker is restarted")
@click.option("--database-url", default=None, help="[env CRONMAN_DATABASE_URL]")
@click.option("--redis-url", default=None, help="[env CRONMAN_REDIS_URL]")
@click.option("--access-log/--no-access-log", default=False, show_default=True)
@click.option("--check-schema/--no-check-schema", default=True, show_default=True,
              help="refuse to start unless the database schema is current")
def api(bind: str, workers: int | None, threads: int, timeout: int,
        database_url: str | None, redis_url: str | None, access_log: bool,
        check_schema: bool) -> None:
    """Serve the HTTP API with gunicorn (wsgi:app)."""
    if database_url:
        os.environ["CRONMAN_DATABASE_URL"] = database_url
    if redis_url:
        os.environ["CRONMAN_REDIS_URL"] = redis_url
    os.environ["CRONMAN_API_BIND"] = bind
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if check_schema:
        _check_schema(settings.database_url)
    if not os.environ.get(METRICS_DIR_ENV):
        path = tempfile.mkdtemp(prefix="cronman-api-metrics-")
        os.environ[METRICS_DIR_ENV] = path
        os.environ[OWNED_METRICS_DIR_ENV] = path
    argv = gunicorn_argv(bind=bind, workers=workers or default_workers(), threads=threads,
                         timeout=timeout, access_log=access_log)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
