#!/usr/bin/env python3
"""Store benchmark on a scratch PostgreSQL database: run history at scale.

Loads ``--rows`` run rows (default 10M) spread over ``--days`` daily
partitions (default 45; every job fires every 10 minutes, the number of
jobs follows from the row count), then measures through cronman's store:

- ``list_runs`` of one job, newest 50 (the run history page), median of 20
  calls on random jobs, and the second page through the cursor;
- ``last_runs`` of 100 jobs (a job list page with last runs);
- the hot path at that size: ``claim_runs`` and ``write_run_updates`` in
  batches of 1000;
- the operator's questions (``--console-requests`` calls each, median and
  p99): "what failed in the last hour" and the run statistics of the last
  hour and the last 24 h, through the store and through HTTP against a
  ``cronman api`` on the scratch database (``GET /v1/runs?status=failed&
  since=-1h``, ``GET /v1/stats/runs``), with the partitions each plan reads
  (EXPLAIN);
- ``drop_expired`` of the oldest day's partition.

About 0.4% of the loaded runs are failed and 0.02% lost; lateness varies
from 0 to 199 ms.

Loading builds each day as a plain table and ATTACHes it (indexes are built
once per partition, much faster than row-by-row index upkeep).

    nice .venv/bin/python ops/bench/store_bench.py --rows 2000000

The scratch database is created on ``--admin-url``'s server and dropped at
the end (``--keep`` keeps it). Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cronman.models import Run, RunFilter, RunSearch, RunStatsQuery, RunUpdate  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.store.partitions import partition_name  # noqa: E402
from cronman.timeutil import utcnow  # noqa: E402
from cronman_bench.services import ScratchDatabase  # noqa: E402

PERIOD_S = 600  # every job fires every 10 minutes: 144 fires per day
FIRES_PER_DAY = 86_400 // PERIOD_S

# One day of runs for every job: job j fires at day + off_j + k * PERIOD_S.
# The id mimics cronman's run ids: 48 bits of Unix ms, then hash bits.
LOAD_DAY_SQL = """
INSERT INTO {table} (id, job_id, scheduled_for, status, attempt, node_id, origin, claimed_at,
                     started_at, finished_at, lateness_ms, duration_ms, result,
                     lease_expires_at, skipped_before)
SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-8' || substr(m, 1, 3) || '-9'
         || substr(m, 4, 3) || '-' || substr(m, 7, 12),
       job_id, ts,
       CASE WHEN substr(m, 1, 2) = '00' THEN 'failed'
            WHEN substr(m, 1, 4) = '0100' THEN 'lost' ELSE 'succeeded' END,
       1, 'bench-node', 'schedule', ts, ts + interval '4 ms',
       ts + interval '35 ms', ('x' || substr(m, 5, 4))::bit(16)::int % 200, 31,
       '{{"http_status": 204}}'::jsonb, ts + interval '30 s', 0
FROM (
  SELECT j.job_id, t.ts,
         lpad(to_hex((extract(epoch FROM t.ts) * 1000)::bigint), 12, '0') AS h,
         md5(j.job_id || t.ts::text) AS m
  FROM bench_jobs j
  CROSS JOIN generate_series(0, {per_day} - 1) AS k
  CROSS JOIN LATERAL (SELECT CAST(:day AS timestamptz)
                             + make_interval(secs => j.off + k * {period}) AS ts) t
) s
"""


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def load(store, days: int, rows: int, out: dict) -> tuple[list[str], list[datetime]]:
    n_jobs = max(1, round(rows / (days * FIRES_PER_DAY)))
    specs = [{
        "namespace": "bench", "name": f"bench-{i:06d}",
        "schedule": {"kind": "interval", "every": PERIOD_S},
        "target": {"kind": "http", "url": "http://127.0.0.1:9/"},
        "retry": {"max_attempts": 1}, "misfire": {"policy": "skip", "grace": 0},
        "delivery": "at_least_once", "concurrency": "allow",
    } for i in range(n_jobs)]
    t0 = time.perf_counter()
    job_ids: list[str] = []
    for start in range(0, n_jobs, 1000):
        job_ids += [j.id for j in store.jobs.create_jobs(specs[start:start + 1000])]
    out["jobs"] = n_jobs
    out["jobs_create_s"] = round(time.perf_counter() - t0, 3)

    today = utcnow().date()
    day_list = [datetime.combine(today - timedelta(days=d), datetime.min.time(), tzinfo=UTC)
                for d in range(days - 1, -1, -1)]
    rng = random.Random(7)
    t0 = time.perf_counter()
    with store.engine.connect() as conn:
        conn.execute(text("SET synchronous_commit = off"))
        conn.execute(text("SET maintenance_work_mem = '256MB'"))
        conn.execute(text("CREATE TEMP TABLE bench_jobs (job_id text, off int)"))
        conn.execute(text("INSERT INTO bench_jobs SELECT * FROM unnest(CAST(:ids AS text[]), "
                          "CAST(:offs AS int[]))"),
                     {"ids": job_ids, "offs": [rng.randrange(PERIOD_S) for _ in job_ids]})
        conn.commit()
        existing = set(store.partitions.existing())
        for i, day in enumerate(day_list):
            name = partition_name(day.date())
            if day.date() in existing:  # made ahead by the migration: detach, fill, attach
                conn.exec_driver_sql(f"ALTER TABLE scheduled_jobs DETACH PARTITION {name}")
            else:
                conn.exec_driver_sql(
                    f"CREATE TABLE {name} (LIKE scheduled_jobs INCLUDING DEFAULTS)")
            conn.execute(text(LOAD_DAY_SQL.format(table=name, per_day=FIRES_PER_DAY,
                                                  period=PERIOD_S)), {"day": day})
            conn.execute(text(f"ALTER TABLE scheduled_jobs ATTACH PARTITION {name} "
                              "FOR VALUES FROM (:lo) TO (:hi)"),
                         {"lo": day, "hi": day + timedelta(days=1)})
            conn.commit()
            print(f"  loaded day {i + 1}/{days} ({name})", flush=True)
        conn.exec_driver_sql("ANALYZE scheduled_jobs")
        conn.commit()
        total = conn.execute(text("SELECT count(*) FROM scheduled_jobs")).scalar_one()
        size = conn.execute(text(
            "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'scheduled_jobs'::regclass")).scalar_one()
    out["rows"] = total
    out["partitions_loaded"] = days
    out["load_s"] = round(time.perf_counter() - t0, 1)
    out["history_size"] = size
    return job_ids, day_list


def measure_reads(store, job_ids: list[str], out: dict) -> None:
    rng = random.Random(11)
    first, second = [], []
    for _ in range(20):
        job_id = rng.choice(job_ids)
        t0 = time.perf_counter()
        page = store.runs.list_runs(job_id, RunFilter(), 50, None)
        first.append(time.perf_counter() - t0)
        assert len(page.items) == 50 and page.next_cursor
        t0 = time.perf_counter()
        store.runs.list_runs(job_id, RunFilter(), 50, page.next_cursor)
        second.append(time.perf_counter() - t0)
    out["list_runs_last50_median_ms"] = round(_median_ms(first), 2)
    out["list_runs_last50_max_ms"] = round(max(first) * 1000, 2)
    out["list_runs_page2_median_ms"] = round(_median_ms(second), 2)
    samples = []
    for _ in range(10):
        ids = rng.sample(job_ids, min(100, len(job_ids)))
        t0 = time.perf_counter()
        found = store.runs.last_runs(ids)
        samples.append(time.perf_counter() - t0)
        assert len(found) == len(ids)
    out["last_runs_100_jobs_median_ms"] = round(_median_ms(samples), 2)
    ids = [p.items[0].id for p in (store.runs.list_runs(j, RunFilter(), 1, None)
                                   for j in rng.sample(job_ids, 10))]
    samples = []
    for run_id in ids:
        t0 = time.perf_counter()
        assert store.runs.get_run(run_id) is not None
        samples.append(time.perf_counter() - t0)
    out["get_run_median_ms"] = round(_median_ms(samples), 2)


def measure_hot_path(store, job_ids: list[str], out: dict, batches: int = 10) -> None:
    from cronman.ids import run_id_for

    # Tomorrow (made ahead, empty), half a second off the loaded whole-second fire times.
    tomorrow = datetime.combine(utcnow().date() + timedelta(days=1), datetime.min.time(),
                                tzinfo=UTC)
    base = tomorrow + timedelta(hours=1, milliseconds=500)
    claim_s = update_s = 0.0
    n = 0
    size = 1000  # one batch of fires: (job, time) pairs cycle over the jobs
    for b in range(batches):
        keys = [(job_ids[i % len(job_ids)],
                 base + timedelta(seconds=b, milliseconds=i // len(job_ids)))
                for i in range(size)]
        runs = [Run(id=run_id_for(j, t), job_id=j, scheduled_for=t, status="claimed",
                    node_id="bench", claimed_at=t, lease_expires_at=t + timedelta(seconds=30))
                for j, t in keys]
        t0 = time.perf_counter()
        won = store.runs.claim_runs(runs, [(r.job_id, r.scheduled_for, 0) for r in runs])
        claim_s += time.perf_counter() - t0
        assert len(won) == len(runs)
        t0 = time.perf_counter()
        store.runs.write_run_updates([RunUpdate(r.id, r.scheduled_for, "running", attempt=1,
                                                started_at=r.scheduled_for) for r in runs])
        store.runs.write_run_updates([RunUpdate(r.id, r.scheduled_for, "succeeded",
                                                finished_at=r.scheduled_for, duration_ms=3,
                                                result={"http_status": 204}) for r in runs])
        update_s += time.perf_counter() - t0
        n += len(runs)
    out["claim_batch_size"] = size
    # The sweeper and the pickup of requested runs, with nothing to take:
    # the partial in-flight index keeps them independent of the history size.
    now = utcnow()
    samples = {"take_expired_runs": [], "take_requested_runs": [], "in_flight_runs_100": []}
    for _ in range(10):
        t0 = time.perf_counter()
        store.runs.take_expired_runs("bench-2", now, now + timedelta(seconds=30), 500)
        samples["take_expired_runs"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.runs.take_requested_runs("bench-2", now + timedelta(seconds=30), 500)
        samples["take_requested_runs"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.runs.in_flight_runs(job_ids[:100])
        samples["in_flight_runs_100"].append(time.perf_counter() - t0)
    for key, values in samples.items():
        out[f"{key}_median_ms"] = round(_median_ms(values), 2)
    out["claims_per_s"] = round(n / claim_s)
    out["updates_per_s"] = round(2 * n / update_s)


def _p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))] * 1000


def _timed(fn, count: int) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return round(_median_ms(samples), 2), round(_p99_ms(samples), 2)


def planned_partitions(store, fn) -> int:
    """How many daily partitions the plans of ``fn``'s statements read, at most."""
    from sqlalchemy import event

    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(cursor.mogrify(statement, parameters).decode())

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        fn()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    most = 0
    with store.engine.connect() as conn:
        for sql in seen:
            if "scheduled_jobs" not in sql:
                continue
            plan = "\n".join(r[0] for r in conn.exec_driver_sql(
                "EXPLAIN " + sql.replace("%", "%%")))
            most = max(most, len(set(re.findall(r"\bon (scheduled_jobs_\w+)", plan))))
    return most


def measure_console(store, url: str, out: dict, count: int) -> None:
    """The operator's questions, through the store and through HTTP."""
    import http.client

    from tests.support.api import running_api

    now = utcnow()
    hour = now - timedelta(hours=1)
    step_start = datetime.fromtimestamp(int(now.timestamp()) // 30 * 30, UTC)
    calls = {
        "failed_last_hour": lambda: store.runs.search_runs(
            RunSearch(since=hour, until=now + timedelta(days=1), statuses=("failed",)),
            100, None),
        "stats_1h": lambda: store.runs.run_stats(RunStatsQuery(
            since=step_start - timedelta(hours=1), until=step_start + timedelta(seconds=30),
            step_seconds=30)),
        "stats_24h": lambda: store.runs.run_stats(RunStatsQuery(
            since=step_start - timedelta(hours=24), until=step_start + timedelta(seconds=30),
            step_seconds=600)),
    }
    for name, fn in calls.items():
        out[f"store_{name}_partitions"] = planned_partitions(store, fn)
        out[f"store_{name}_median_ms"], out[f"store_{name}_p99_ms"] = _timed(fn, count)
    out["failed_last_hour_rows"] = len(calls["failed_last_hour"]().items)
    paths = {"runs_failed_1h": "/v1/runs?status=failed&since=-1h",
             "stats_1h": "/v1/stats/runs?since=-1h",
             "stats_24h": "/v1/stats/runs?since=-24h&step=600"}
    with running_api(url, workers=2, threads=4) as base:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        for name, path in paths.items():
            def get(path: str = path) -> None:
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
                assert resp.status == 200, (resp.status, body[:200])

            get()  # warm: the worker's first query of this shape
            out[f"http_{name}_median_ms"], out[f"http_{name}_p99_ms"] = _timed(get, count)
        conn.close()


def measure_drop(store, day_list: list[datetime], out: dict) -> None:
    oldest = day_list[0]
    with store.engine.connect() as conn:
        out["dropped_partition_rows"] = conn.execute(
            text(f"SELECT count(*) FROM {partition_name(oldest.date())}")).scalar_one()
    retention = len(day_list) - 2  # makes exactly the oldest day expire
    t0 = time.perf_counter()
    dropped = store.partitions.drop_expired(utcnow(), retention)
    out["drop_expired_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["dropped"] = dropped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=45)
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="a database on the server where the scratch database is made")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--console-requests", type=int, default=200,
                    help="calls per question for the operator's questions (0: skip them)")
    args = ap.parse_args()

    # A timeout or Ctrl-C still drops the scratch database (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    db = ScratchDatabase(args.admin_url, prefix="cronman_bench").create()
    name, url = db.name, db.url
    out: dict = {"database": name}
    try:
        upgrade(url)
        store = open_store(url)
        try:
            print(f"loading {args.rows:,} rows over {args.days} days into {name} ...",
                  flush=True)
            job_ids, day_list = load(store, args.days, args.rows, out)
            measure_reads(store, job_ids, out)
            if args.console_requests:
                measure_console(store, url, out, args.console_requests)
            measure_hot_path(store, job_ids, out)
            measure_drop(store, day_list, out)
        finally:
            store.close()
    finally:
        if not args.keep:
            db.drop()
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        for key, value in out.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
