"""The peer: the same workload on APScheduler 3.x, as a Python team would run it.

One process (``python -m cronman_bench.peer``), a ``BackgroundScheduler``
with a ``ThreadPoolExecutor(20)``, the job store in memory or on PostgreSQL
(``SQLAlchemyJobStore``), interval jobs with ``start_date`` anchors, each job
POSTing with a ``requests.Session`` per thread to the receiver.

Each POST carries the same ``Cronman-*`` headers a cronman fire carries, with
APScheduler's own scheduled run time as ``Cronman-Scheduled-For``, so the
receiver's log measures both systems the same way. APScheduler does not hand
the run time to the job function; a thin executor subclass passes it through
a thread-local around APScheduler's own ``run_job``.

Job options favour delivery over dropping: ``misfire_grace_time=None`` (fire
however late), ``coalesce=False`` (every fire time, not one for many) and a
high ``max_instances`` -- so a peer that falls behind shows it as lateness,
never as silently skipped fires.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from cronman_bench.workload import Jobs, dump_jobs, jobs_from_dict

PEER_KINDS = ("apscheduler-memory", "apscheduler-sqlalchemy")
APS4_KIND = "apscheduler4-postgres"
THREADS = 20

_local = threading.local()
_receiver_url = ""


def fire(key: str) -> None:
    """The job function: one POST to the receiver (module level: picklable by reference)."""
    import requests

    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    scheduled: datetime = _local.scheduled
    from cronman.timeutil import format_rfc3339

    resp = session.post(_receiver_url, data=b"", timeout=10, headers={
        "Cronman-Job-Id": key,
        "Cronman-Scheduled-For": format_rfc3339(scheduled) or "",
        "Cronman-Run-Id": f"{key}@{int(scheduled.timestamp() * 1000)}",
        "Cronman-Attempt": "1",
    })
    resp.raise_for_status()


def _run_job_timed(job, jobstore_alias, run_times, logger_name):  # type: ignore[no-untyped-def]
    from apscheduler.executors.base import run_job

    events = []
    for run_time in run_times:
        _local.scheduled = run_time
        events.extend(run_job(job, jobstore_alias, [run_time], logger_name))
    return events


def _timed_executor(threads: int):  # type: ignore[no-untyped-def]
    from apscheduler.executors.pool import ThreadPoolExecutor

    class TimedThreadPoolExecutor(ThreadPoolExecutor):  # type: ignore[misc]
        """APScheduler's thread pool, telling the job its scheduled run time."""

        def _do_submit_job(self, job, run_times):  # type: ignore[no-untyped-def]
            def callback(f):  # type: ignore[no-untyped-def]
                exc = f.exception()
                if exc:
                    self._run_job_error(job.id, exc, exc.__traceback__)
                else:
                    self._run_job_success(job.id, f.result())

            f = self._pool.submit(_run_job_timed, job, job._jobstore_alias, run_times,
                                  self._logger.name)
            f.add_done_callback(callback)

    return TimedThreadPoolExecutor(threads)


def peer_key(i: int) -> str:
    return f"ap-{i:07d}"


def run_peer(kind: str, w: Jobs, receiver_url: str, database_url: str | None,
             ready_file: Path, threads: int = THREADS) -> None:
    """Schedule the workload on APScheduler and run until SIGTERM."""
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    global _receiver_url
    _receiver_url = receiver_url
    if kind == "apscheduler-memory":
        from apscheduler.jobstores.memory import MemoryJobStore

        store = MemoryJobStore()
    elif kind == "apscheduler-sqlalchemy":
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

        if not database_url:
            raise SystemExit("apscheduler-sqlalchemy needs --database-url")
        store = SQLAlchemyJobStore(url=database_url)
    else:
        raise SystemExit(f"unknown peer {kind!r}")
    scheduler = BackgroundScheduler(
        jobstores={"default": store},
        executors={"default": _timed_executor(threads)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1000},
        timezone="UTC",
    )
    from cronman.timeutil import from_ms

    for i in range(w.count):
        g, j = w.local(i)
        # The job's window: APScheduler fires from start_date (a time on the job's
        # grid) to end_date (inclusive, like cronman's end_at).
        start = g.anchor_ms(j) if g.start_ms is None else g.first_fire_ms(j, g.start_ms)
        end = None if g.end_ms is None else from_ms(g.end_ms - 1)
        scheduler.add_job(fire, IntervalTrigger(seconds=g.every_ms // 1000,
                                                start_date=from_ms(start), end_date=end),
                          args=(peer_key(i),), id=peer_key(i), name=peer_key(i))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    scheduler.start()
    ready_file.write_text(f"{time.time()}\n")
    stop.wait()
    scheduler.shutdown(wait=False)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=PEER_KINDS, required=True)
    p.add_argument("--receiver", required=True)
    p.add_argument("--workload", type=Path, required=True, help="the workload, as JSON")
    p.add_argument("--database-url")
    p.add_argument("--threads", type=int, default=THREADS)
    p.add_argument("--ready-file", type=Path, required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    w = jobs_from_dict(json.loads(a.workload.read_text()))
    run_peer(a.kind, w, a.receiver, a.database_url, a.ready_file, a.threads)


def peer_argv(kind: str, w: Jobs, receiver_url: str, database_url: str | None,
              ready_file: Path) -> list[str]:
    spec = ready_file.with_suffix(".workload.json")
    spec.write_text(dump_jobs(w))
    argv = [sys.executable, "-m", "cronman_bench.peer", "--kind", kind, "--receiver",
            receiver_url, "--workload", str(spec), "--ready-file", str(ready_file)]
    if database_url:
        argv += ["--database-url", database_url]
    return argv


if __name__ == "__main__":
    main()
