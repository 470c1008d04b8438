"""The second peer: APScheduler 4 with its PostgreSQL data store, in several processes.

This file runs in a virtualenv of its own (APScheduler 4 and 3 share the
package name ``apscheduler``; see ``cronman_bench.peer_venv``), so it
imports nothing from cronman: only the standard library, APScheduler 4,
SQLAlchemy with asyncpg, and aiohttp.

``--setup`` creates APScheduler's tables in the scratch database, registers
the task and adds one schedule per job (an ``IntervalTrigger`` with the
job's first fire time as ``start_time`` and its window's end as
``end_time``), then exits. ``--run`` is one scheduler process (role both:
it acquires due schedules, makes jobs of them and runs jobs); the benchmark
starts several on the same database, coordinated by APScheduler's own
PostgreSQL data store and its asyncpg event broker (LISTEN/NOTIFY).

The task is a coroutine POSTing to the receiver through one aiohttp session
per process, with the same ``Cronman-*`` headers a cronman fire carries and
APScheduler's ``scheduled_fire_time`` as ``Cronman-Scheduled-For``. Options
favour delivery over dropping, as for the 3.x peer: no misfire grace, every
fire time kept (``CoalescePolicy.all``), no limit on running jobs of the task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TASK_ID = "cronman_bench_fire"
_receiver_url = ""
_session: Any = None


def _rfc3339(dt: datetime) -> str:
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


async def fire(key: str) -> None:
    """The task: one POST to the receiver."""
    import aiohttp
    from apscheduler import current_job

    global _session
    if _session is None:
        _session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=128),
            timeout=aiohttp.ClientTimeout(total=10))
    scheduled: datetime = current_job.get().scheduled_fire_time
    async with _session.post(_receiver_url, data=b"", headers={
        "Cronman-Job-Id": key,
        "Cronman-Scheduled-For": _rfc3339(scheduled),
        "Cronman-Run-Id": f"{key}@{int(scheduled.timestamp() * 1000)}",
        "Cronman-Attempt": "1",
    }) as resp:
        resp.raise_for_status()


def _stores(database_url: str) -> tuple[Any, Any, Any]:
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(database_url, pool_size=10, max_overflow=10)
    return (engine, SQLAlchemyDataStore(engine),
            AsyncpgEventBroker.from_async_sqla_engine(engine))


def _at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


async def setup(database_url: str, schedules: list[dict[str, Any]]) -> None:
    """Create the tables, the task and every schedule; then return."""
    from apscheduler import AsyncScheduler, CoalescePolicy, ConflictPolicy
    from apscheduler.triggers.interval import IntervalTrigger

    engine, store, broker = _stores(database_url)
    async with AsyncScheduler(store, broker, identity="setup") as scheduler:
        await scheduler.configure_task(TASK_ID, func=fire, job_executor="async",
                                       max_running_jobs=None, misfire_grace_time=None)
        for s in schedules:
            await scheduler.add_schedule(
                TASK_ID, IntervalTrigger(seconds=s["every_s"], start_time=_at(s["first_ms"]),
                                         end_time=_at(s["end_ms"])),
                id=s["key"], args=(s["key"],), coalesce=CoalescePolicy.all,
                misfire_grace_time=None, conflict_policy=ConflictPolicy.replace)
    await engine.dispose()


async def run(database_url: str, identity: str, ready_file: Path, max_jobs: int) -> None:
    """One scheduler process, until SIGTERM."""
    from apscheduler import AsyncScheduler

    engine, store, broker = _stores(database_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncScheduler(store, broker, identity=identity,
                              max_concurrent_jobs=max_jobs) as scheduler:
        await scheduler.configure_task(TASK_ID, func=fire, job_executor="async",
                                       max_running_jobs=None, misfire_grace_time=None)
        await scheduler.start_in_background()
        ready_file.write_text(f"{time.time()}\n")
        await stop.wait()
        await scheduler.stop()
        await scheduler.wait_until_stopped()
    if _session is not None:
        await _session.close()
    await engine.dispose()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", required=True, help="postgresql+asyncpg://...")
    p.add_argument("--receiver", default="")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--setup", type=Path, metavar="SCHEDULES_JSON")
    mode.add_argument("--run", action="store_true")
    p.add_argument("--identity", default="peer")
    p.add_argument("--ready-file", type=Path)
    p.add_argument("--max-concurrent-jobs", type=int, default=100)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    global _receiver_url
    _receiver_url = a.receiver
    if a.setup is not None:
        asyncio.run(setup(a.database_url, json.loads(a.setup.read_text())))
        return
    if a.ready_file is None:
        raise SystemExit("--run needs --ready-file")
    asyncio.run(run(a.database_url, a.identity, a.ready_file, a.max_concurrent_jobs))


if __name__ == "__main__":
    main()
