#!/usr/bin/env python3
"""PostgreSQL CPU per fire for the rows a fire writes, one kind at a time.

A scheduled fire costs PostgreSQL three row writes: its claim (an INSERT
through the fence), its job's cursor (an UPDATE of ``jobs``) and its result
(an UPDATE of the run row). This drives each alone through cronman's store,
in batches of ``--batch`` like a node at ``--jobs`` fires/s, for
``--seconds`` of fire times each, and reads the CPU of the database's
server backends from /proc before and after: microseconds of PostgreSQL CPU
per row, and the client's CPU (this process: building the statements'
arguments, the driver) and wall time per row.

    .venv/bin/python ops/bench/fire_rows_bench.py --rounds 3
    .venv/bin/python ops/bench/fire_rows_bench.py --fillfactor 100   # jobs as before 0008

A scratch database is made on ``--admin-url``'s server and dropped at the
end. Not a test: it prints figures (medians over ``--rounds``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cronman.api.validation import validate_job  # noqa: E402
from cronman.ids import new_job_id, run_id_for  # noqa: E402
from cronman.models import Run, RunUpdate  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.timeutil import from_ms, to_ms, utcnow  # noqa: E402
from cronman_bench.cost import read_cpu  # noqa: E402
from cronman_bench.services import PgBackends, ScratchDatabase  # noqa: E402

KINDS = ("claim", "cursor", "result")


def _job_spec(i: int) -> dict[str, Any]:
    """A job as the API hands it to the store (validated, defaults filled in)."""
    return validate_job({"name": f"rows-{i}", "namespace": "bench",
                         "schedule": {"kind": "interval", "every": 1},
                         "target": {"kind": "http", "url": "http://127.0.0.1:9/hook",
                                    "method": "POST",
                                    "headers": {"Content-Type": "application/json"},
                                    "body": '{"hello": "world"}'}},
                        job_id=new_job_id(), now=utcnow())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs (fires per second of fire times)")
    ap.add_argument("--seconds", type=int, default=20, help="seconds of fire times per kind")
    ap.add_argument("--batch", type=int, default=200, help="rows per statement batch")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--fillfactor", type=int, default=None,
                    help="set the jobs table's fillfactor first (100: as before 0008)")
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()

    db = ScratchDatabase(args.admin_url, prefix="cronman_rows").create()
    backends = PgBackends(args.admin_url, [db.name])
    try:
        upgrade(db.url)
        store = open_store(db.url, pool_size=1)
        if args.fillfactor is not None:
            with store.engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE jobs SET (fillfactor = {int(args.fillfactor)})"))
        specs = [_job_spec(i) for i in range(args.jobs)]
        ids = [j.id for j in store.jobs.create_jobs(specs)]
        t0 = to_ms(utcnow()) // 1000 * 1000 + 60_000
        lease = timedelta(seconds=30)

        def runs_at(second: int) -> list[Run]:
            t = from_ms(t0 + second * 1000)
            now = utcnow()
            return [Run(id=run_id_for(j, t), job_id=j, scheduled_for=t, status="claimed",
                        attempt=1, node_id="n1", claimed_at=now, lease_expires_at=now + lease)
                    for j in ids]

        def updates_of(runs: list[Run]) -> list[RunUpdate]:
            now = utcnow()
            return [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded",
                              attempt=1, started_at=r.claimed_at, finished_at=now,
                              lateness_ms=1, duration_ms=2, result={"http_status": 204})
                    for r in runs]

        # What each kind hands the store per batch (made before the clock runs).
        def claim(runs: list[Run]) -> Callable[[], object]:
            return lambda: store.runs.claim_runs(runs)

        def cursor(runs: list[Run]) -> Callable[[], object]:
            cursors = [(r.job_id, r.scheduled_for, 0) for r in runs]
            return lambda: store.runs.claim_runs([], cursors)

        def result(runs: list[Run]) -> Callable[[], object]:
            updates = updates_of(runs)
            return lambda: store.runs.write_run_updates(updates, "n1")

        drive: dict[str, Callable[[list[Run]], Callable[[], object]]] = {
            "claim": claim, "cursor": cursor, "result": result}
        # Warm up: connections made, statements prepared.
        first = runs_at(0)
        for kind in KINDS:
            drive[kind](first)()
        figures: dict[str, list[tuple[float, float, float]]] = {k: [] for k in KINDS}
        second = 1
        for _ in range(args.rounds):
            claimed_from = second
            for kind in KINDS:
                if kind == "result":
                    second = claimed_from  # the rows the claim phase made
                calls = [drive[kind](runs[i:i + args.batch])
                         for s in range(second, second + args.seconds)
                         for runs in [runs_at(s)]
                         for i in range(0, len(runs), args.batch)]
                rows = args.seconds * len(ids)
                pids = backends.pids()
                cpu0 = _cpu(pids)
                client0 = time.process_time()
                wall0 = time.perf_counter()
                for call in calls:
                    call()
                wall = time.perf_counter() - wall0
                client = time.process_time() - client0
                cpu = _cpu(pids) - cpu0
                figures[kind].append((cpu * 1e6 / rows, client * 1e6 / rows, wall * 1e6 / rows))
                second += args.seconds
            second = claimed_from + 2 * args.seconds
        store.close()
    finally:
        backends.close()
        db.drop()
    print(f"{args.jobs} jobs, batches of {args.batch}, {args.seconds} s of fire times per "
          f"kind, {args.rounds} round(s); jobs fillfactor "
          f"{args.fillfactor if args.fillfactor is not None else 'as migrated'}")
    print("| row write | PostgreSQL CPU µs/row | client CPU µs/row | wall µs/row |")
    print("| --- | ---: | ---: | ---: |")
    for kind in KINDS:
        pg_us, client_us, wall_us = (statistics.median(f[i] for f in figures[kind])
                                     for i in range(3))
        print(f"| {kind} | {pg_us:.1f} | {client_us:.1f} | {wall_us:.1f} |")


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        got = read_cpu(pid)
        if got is not None:
            total += got[1]
    return total


if __name__ == "__main__":
    main()
