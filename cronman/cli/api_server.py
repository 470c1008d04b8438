"""``cronman api``: serve the API under gunicorn (``wsgi:app``).

Settings reach the workers through the environment (CRONMAN_*); ``--bind``
defaults to CRONMAN_API_BIND. The worker class is gthread: a request spends
most of its time waiting on the database, which threads overlap cheaply.

Workers: ``--workers`` / ``CRONMAN_API_WORKERS``; by default 2 per core, but
no more than the memory limit of the process's cgroup holds (a container's
limit: each worker takes ~65 MB once warm; ``WORKER_MEMORY_MB`` leaves room
for larger answers), so a pod on a many-core node is not killed for memory.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

import cronman
from cronman.api.gunicorn_conf import ACCESS_LOG_ENV, METRICS_DIR_ENV, OWNED_METRICS_DIR_ENV
from cronman.cli.group import cli
from cronman.cli.schema_wait import wait_for_schema
from cronman.config import DEFAULT_API_BIND, Settings

DEFAULT_THREADS = 4
DEFAULT_TIMEOUT = 30
WORKERS_ENV = "CRONMAN_API_WORKERS"
WORKER_MEMORY_MB = 96  # a warm worker is ~65 MB (RSS); room for large answers
MASTER_MEMORY_MB = 64  # gunicorn's master (~25 MB) and headroom
CGROUP_MEMORY_FILES = ("/sys/fs/cgroup/memory.max",  # cgroup v2
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # cgroup v1
_NO_LIMIT = 1 << 60


def memory_limit_bytes(paths: tuple[str, ...] = CGROUP_MEMORY_FILES) -> int | None:
    """The memory limit of this process's cgroup, or None when there is none."""
    for path in paths:
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw == "max":
            return None
        try:
            value = int(raw)
        except ValueError:
            continue
        return None if value >= _NO_LIMIT else value
    return None


def default_workers(cpus: int | None = None, limit_bytes: int | None = None) -> int:
    """2 per core, at most what the memory limit holds, at least 1."""
    workers = 2 * (cpus or os.cpu_count() or 1)
    limit = memory_limit_bytes() if limit_bytes is None else limit_bytes
    if limit:
        fits = (limit // (1024 * 1024) - MASTER_MEMORY_MB) // WORKER_MEMORY_MB
        workers = min(workers, int(fits))
    return max(1, workers)


def app_spec() -> tuple[str, str | None]:
    """``wsgi:app`` and the directory holding wsgi.py, else the factory in the package."""
    root = Path(cronman.__file__).resolve().parent.parent
    if (root / "wsgi.py").is_file():
        return "wsgi:app", str(root)
    return "cronman.processes.api:make_app()", None


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


def long_polls_for(threads: int, asked: int) -> int:
    """The waiting claims one gunicorn worker of ``threads`` holds: at most
    ``asked`` (CRONMAN_API_LONG_POLLS), leaving at least one thread free."""
    return max(0, min(asked, threads - 1))


@cli.command("api")
@click.option("--bind", envvar="CRONMAN_API_BIND", default=DEFAULT_API_BIND,
              show_default=True, help="HOST:PORT to listen on [env CRONMAN_API_BIND]")
@click.option("--workers", type=click.IntRange(min=1), default=None, envvar=WORKERS_ENV,
              help="worker processes [env CRONMAN_API_WORKERS; default: 2 x cores, as many "
                   "as the cgroup's memory limit holds at ~96 MB each]")
@click.option("--threads", type=click.IntRange(min=1), default=DEFAULT_THREADS,
              show_default=True, help="threads per worker (gthread)")
@click.option("--timeout", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT,
              show_default=True, help="seconds before a stuck worker is restarted")
@click.option("--database-url", default=None, help="[env CRONMAN_DATABASE_URL]")
@click.option("--redis-url", default=None, help="[env CRONMAN_REDIS_URL]")
@click.option("--access-log/--no-access-log", default=False, show_default=True)
@click.option("--check-schema/--no-check-schema", default=True, show_default=True,
              help="refuse to start unless the database schema is current (an "
                   "unreachable database is waited for, up to 60 s)")
def api(bind: str, workers: int | None, threads: int, timeout: int,
        database_url: str | None, redis_url: str | None, access_log: bool,
        check_schema: bool) -> None:
    """Serve the HTTP API with gunicorn (wsgi:app)."""
    if database_url:
        os.environ["CRONMAN_DATABASE_URL"] = database_url
    if redis_url:
        os.environ["CRONMAN_REDIS_URL"] = redis_url
    os.environ["CRONMAN_API_BIND"] = bind
    os.environ[ACCESS_LOG_ENV] = "1" if access_log else "0"
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    # Waiting claims never take every thread of a worker: one is always free.
    os.environ["CRONMAN_API_LONG_POLLS"] = str(long_polls_for(threads, settings.api_long_polls))
    if check_schema:
        wait_for_schema(settings.database_url, "cronman api")
    if not os.environ.get(METRICS_DIR_ENV):
        path = tempfile.mkdtemp(prefix="cronman-api-metrics-")
        os.environ[METRICS_DIR_ENV] = path
        os.environ[OWNED_METRICS_DIR_ENV] = path
    argv = gunicorn_argv(bind=bind, workers=workers or default_workers(), threads=threads,
                         timeout=timeout, access_log=access_log)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
