#!/usr/bin/env python3
"""Notifier queries on a large run history (scratch PostgreSQL database).

Loads ``--rows`` run rows over ``--days`` daily partitions (every job fires
every 10 minutes; ``--failure-rate`` of them failed, all already read by a
notifier except ``--unread`` recent ones), gives ``--watched`` jobs a rule
with ``failed``, ``recovered`` and ``late``, then prints the plan and time of
each query a notifier pass makes, and the time of whole passes:

- the unread failures (``ix_scheduled_jobs_unnotified``: only failures not
  read yet are in it, so it stays small however long the history);
- marking them read, recording events and messages (``write_pass``);
- the first success of failing jobs; the starts of due fire times (late).

    nice .venv/bin/python ops/bench/notify_bench.py --rows 1000000

Not a test: it prints figures (take them on a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cronman.bench.services import ScratchDatabase  # noqa: E402

from cronman.notify.detector import Detector  # noqa: E402
from cronman.notify.metrics import NotifierMetrics  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.store.partitions import partition_name  # noqa: E402
from cronman.timeutil import utcnow  # noqa: E402

PERIOD_S = 600
FIRES_PER_DAY = 86_400 // PERIOD_S
LOAD_DAY_SQL = """
INSERT INTO {table} (id, job_id, scheduled_for, status, attempt, node_id, origin, claimed_at,
                     started_at, finished_at, duration_ms, error, skipped_before,
                     notified_attempt)
SELECT md5(job_id || ts::text)::uuid::text, job_id, ts,
       CASE WHEN failed THEN 'failed' ELSE 'succeeded' END, 1, 'bench', 'schedule', ts, ts,
       ts + interval '35 ms', 31, CASE WHEN failed THEN 'HTTP 500' END, 0,
       CASE WHEN failed THEN 1 END
FROM (
  SELECT j.job_id, t.ts, random() < :rate AS failed
  FROM bench_jobs j
  CROSS JOIN generate_series(0, {per_day} - 1) AS k
  CROSS JOIN LATERAL (SELECT CAST(:day AS timestamptz)
                             + make_interval(secs => j.off + k * {period}) AS ts) t
) s
"""
RULE = [{"events": ["failed", "recovered", "late"], "late_after": 60, "digest_interval": 900,
         "channel": {"kind": "webhook", "url": "https://hooks.example.com/x", "headers": {},
                     "timeout": 10}}]


def load(store, args, out) -> list[str]:
    n_jobs = max(1, round(args.rows / (args.days * FIRES_PER_DAY)))
    specs = [{"namespace": "bench", "name": f"bench-{i:06d}",
              "schedule": {"kind": "interval", "every": PERIOD_S,
                           "anchor": "2026-01-01T00:00:00Z"},
              "target": {"kind": "http", "url": "http://127.0.0.1:9/"},
              "retry": {"max_attempts": 1}, "misfire": {"policy": "skip", "grace": 0},
              "delivery": "at_least_once", "concurrency": "allow",
              "notify": RULE if i < args.watched else None} for i in range(n_jobs)]
    job_ids: list[str] = []
    for start in range(0, n_jobs, 1000):
        job_ids += [j.id for j in store.jobs.create_jobs(specs[start:start + 1000])]
    today = utcnow().date()
    days = [datetime.combine(today - timedelta(days=d), datetime.min.time(), tzinfo=UTC)
            for d in range(args.days - 1, -1, -1)]
    rng = random.Random(7)
    t0 = time.perf_counter()
    with store.engine.connect() as conn:
        conn.execute(text("SET synchronous_commit = off"))
        conn.execute(text("CREATE TEMP TABLE bench_jobs (job_id text, off int)"))
        conn.execute(text("INSERT INTO bench_jobs SELECT * FROM unnest(CAST(:ids AS text[]), "
                          "CAST(:offs AS int[]))"),
                     {"ids": job_ids, "offs": [rng.randrange(PERIOD_S) for _ in job_ids]})
        existing = set(store.partitions.existing())
        for day in days:
            name = partition_name(day.date())
            if day.date() in existing:
                conn.exec_driver_sql(f"ALTER TABLE scheduled_jobs DETACH PARTITION {name}")
            else:
                conn.exec_driver_sql(
                    f"CREATE TABLE {name} (LIKE scheduled_jobs INCLUDING DEFAULTS)")
            conn.execute(text(LOAD_DAY_SQL.format(table=name, per_day=FIRES_PER_DAY,
                                                  period=PERIOD_S)),
                         {"day": day, "rate": args.failure_rate})
            conn.execute(text(f"ALTER TABLE scheduled_jobs ATTACH PARTITION {name} "
                              "FOR VALUES FROM (:lo) TO (:hi)"),
                         {"lo": day, "hi": day + timedelta(days=1)})
            conn.commit()
        # The latest failures are not read yet.
        conn.execute(text(
            "UPDATE scheduled_jobs SET notified_attempt = NULL WHERE id IN ("
            " SELECT id FROM scheduled_jobs WHERE status = 'failed'"
            " AND scheduled_for < now() ORDER BY scheduled_for DESC LIMIT :n)"),
            {"n": args.unread})
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
        out["rows"] = conn.execute(text("SELECT count(*) FROM scheduled_jobs")).scalar_one()
        out["failed_rows"] = conn.execute(text(
            "SELECT count(*) FROM scheduled_jobs WHERE status = 'failed'")).scalar_one()
        out["partitions"] = conn.execute(text(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'scheduled_jobs'::regclass"
        )).scalar_one()
    out["jobs"] = n_jobs
    out["load_s"] = round(time.perf_counter() - t0, 1)
    return job_ids


def explain(store, sql: str, params: dict) -> tuple[str, list[str]]:
    """(planning + execution time, the plan's first scan lines) of ``sql``, run twice
    (the second time is reported: caches warm, as for a notifier's every pass)."""
    with store.engine.connect() as conn:
        conn.execute(text(sql), params).all()
        rows = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + sql), params).scalars().all()
    run = next(float(r.split("Execution Time:")[1].split("ms")[0]) for r in rows
               if "Execution Time" in r)
    planning = next(float(r.split("Planning Time:")[1].split("ms")[0]) for r in rows
                    if "Planning Time" in r)
    scans = [" ".join(r.split()) for r in rows if "Scan" in r or "Append" in r]
    return f"planning {planning:.2f} ms + execution {run:.2f} ms", scans[:4]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--admin-url", default="postgresql+psycopg2://postgres@127.0.0.1/test")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=45)
    ap.add_argument("--failure-rate", type=float, default=0.01)
    ap.add_argument("--unread", type=int, default=500)
    ap.add_argument("--watched", type=int, default=1000)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    out: dict = {}
    db = ScratchDatabase(args.admin_url, prefix="cronman_notifybench").create()
    try:
        upgrade(db.url)
        store = open_store(db.url)
        job_ids = load(store, args, out)
        since = utcnow() - timedelta(days=1)
        out["unnotified_runs_ms"], plan = explain(store, (
            "SELECT id FROM scheduled_jobs WHERE status IN ('failed', 'lost') AND "
            "(notified_attempt IS NULL OR notified_attempt < attempt) "
            "ORDER BY scheduled_for LIMIT 1000"), {})
        out["unnotified_runs_plan"] = plan
        sample = job_ids[:100]
        from cronman.store.notify_outbox import _PG_FIRST_SUCCESSES

        out["first_successes_100_ms"], plan = explain(store, str(_PG_FIRST_SUCCESSES), {
            "ids": sample, "since": [since] * len(sample)})
        out["first_successes_plan"] = plan
        t = utcnow().replace(microsecond=0) - timedelta(minutes=5)
        out["run_starts_100_ms"], plan = explain(store, (
            "SELECT job_id FROM scheduled_jobs WHERE (job_id, scheduled_for) IN "
            "(SELECT unnest(CAST(:ids AS text[])), CAST(:t AS timestamptz)) "
            "AND scheduled_for IN (:t)"), {"ids": sample, "t": t})
        out["run_starts_plan"] = plan
        detector = Detector(store.notify_outbox, store.jobs, store.notification_rules,
                            node_id="bench", metrics=NotifierMetrics(None))
        t0 = time.perf_counter()
        detector.activate(utcnow())
        out["activate_s"] = round(time.perf_counter() - t0, 3)
        out["late_watched"] = len(detector.watch)
        passes = []
        for _ in range(5):
            t0 = time.perf_counter()
            stats = detector.step(utcnow())
            passes.append((round(time.perf_counter() - t0, 3), stats.runs_read, stats.events,
                           stats.messages))
        out["passes (s, runs read, events, messages)"] = passes
        store.close()
    finally:
        if not args.keep:
            db.drop()
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
