#!/usr/bin/env python3
"""Dashboard benchmark: first paint of the jobs view with many jobs.

Loads ``--jobs`` jobs (default 100,000, in 10 namespaces, each with one run
so every row shows a last run) into a scratch PostgreSQL database, serves it
with ``cronman api`` (gunicorn, 2 workers), and opens the dashboard in
Debian's headless Chromium (playwright, ``/usr/bin/chromium``) ``--repeat``
times, each in a fresh browser context (nothing cached). Per load:

- first contentful paint (the page's frame, before any data);
- jobs rendered: navigation start to the ``cronman:first-view`` mark the
  dashboard sets when the first page of jobs is in the table;
- search: typing a name prefix to the narrowed table (the search box waits
  250 ms after the last key before it asks the API; that wait is included).

and, through HTTP alone, the API calls behind them (the first page of the
list with last runs, the same narrowed by a name prefix), 20 calls each.
Medians (and the slowest) are printed. Not a test: it prints figures.

    nice .venv/bin/python ops/bench/dashboard_bench.py --jobs 100000
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.bench.services import ScratchDatabase  # noqa: E402

from cronman.ids import run_id_for  # noqa: E402
from cronman.models import Run, RunUpdate  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.timeutil import utcnow  # noqa: E402
from tests.support.api import running_api  # noqa: E402
from tests.support.browser import PageWatch, launch  # noqa: E402

BATCH = 1000
NAMESPACES = 10


def load(store, n_jobs: int, out: dict) -> None:
    t0 = time.perf_counter()
    now = utcnow().replace(microsecond=0)
    for start in range(0, n_jobs, BATCH):
        specs = [{
            "namespace": f"team-{i % NAMESPACES}", "name": f"job-{i:07d}",
            "schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "UTC"},
            "target": {"kind": "http", "url": "http://127.0.0.1:9/hook", "method": "POST",
                       "headers": {}, "body": "", "timeout": 10},
            "retry": {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
            "misfire": {"policy": "fire_once", "grace": 300},
            "delivery": "at_least_once", "concurrency": "allow", "labels": {"tier": "bench"},
        } for i in range(start, min(n_jobs, start + BATCH))]
        jobs = store.jobs.create_jobs(specs)
        t = now - timedelta(minutes=5)
        runs = [Run(id=run_id_for(j.id, t), job_id=j.id, scheduled_for=t, status="claimed",
                    attempt=1, node_id="bench", claimed_at=t, lease_expires_at=t)
                for j in jobs]
        store.runs.claim_runs(runs)
        store.runs.write_run_updates([
            RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded",
                      lateness_ms=3, duration_ms=20, result={"http_status": 204})
            for r in runs])
    with store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    out["jobs"] = n_jobs
    out["load_s"] = round(time.perf_counter() - t0, 1)


def measure(base: str, repeat: int, out: dict) -> None:
    from playwright.sync_api import sync_playwright

    fcp, rendered, search = [], [], []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            for _ in range(repeat):
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                watch = PageWatch().attach(page)
                page.goto(base + "/#/jobs")
                page.wait_for_selector("main[data-state=ready]", timeout=60_000)
                marks = page.evaluate(
                    "({view: performance.getEntriesByName('cronman:first-view')[0].startTime,"
                    " fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {})"
                    ".startTime})")
                rendered.append(marks["view"])
                if marks["fcp"] is not None:
                    fcp.append(marks["fcp"])
                rows = page.locator("#jobs-list tbody tr")
                assert rows.count() == 50, rows.count()
                t0 = time.perf_counter()
                page.fill("#job-search", "job-000042")
                deadline = time.monotonic() + 30
                while rows.count() != 10 and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert rows.count() == 10, rows.count()
                search.append((time.perf_counter() - t0) * 1000)
                watch.assert_clean()
                context.close()
        finally:
            browser.close()
    for name, samples in (("first_contentful_paint", fcp), ("jobs_rendered", rendered),
                          ("search_narrowed", search)):
        if samples:
            out[f"{name}_median_ms"] = round(statistics.median(samples), 1)
            out[f"{name}_max_ms"] = round(max(samples), 1)
    out["repeat"] = repeat


def measure_api(base: str, out: dict, count: int = 20) -> None:
    import http.client

    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    paths = {"api_first_page": "/v1/jobs?sort=name&with_last_run=true&limit=50",
             "api_prefix_search": "/v1/jobs?sort=name&with_last_run=true&limit=50"
                                  "&name_prefix=job-000042"}
    for name, path in paths.items():
        samples = []
        for _ in range(count + 1):
            t0 = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            samples.append((time.perf_counter() - t0) * 1000)
        samples = samples[1:]  # the first warms the worker
        out[f"{name}_median_ms"] = round(statistics.median(samples), 1)
        out[f"{name}_max_ms"] = round(max(samples), 1)
    conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="a database on the server where the scratch database is made")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    db = ScratchDatabase(args.admin_url, prefix="cronman_bench").create()
    out: dict = {"database": db.name}
    try:
        upgrade(db.url)
        store = open_store(db.url)
        try:
            print(f"loading {args.jobs:,} jobs into {db.name} ...", flush=True)
            load(store, args.jobs, out)
        finally:
            store.close()
        with running_api(db.url, workers=2, threads=4) as base:
            measure_api(base, out)
            measure(base, args.repeat, out)
    finally:
        if not args.keep:
            db.drop()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
