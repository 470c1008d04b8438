#!/usr/bin/env python
"""The audit export under a fire-like load: throughput, lag, and the fire path's cost.

    .venv/bin/python ops/bench/audit_bench.py --fires 1000 --phase 20

A private PostgreSQL with wal_level=logical (Debian's binaries, as the tests
start it). A writer drives the run table the way scheduler nodes do at
``--fires`` fires/s: every 100 ms one claim transaction (the run rows and the
jobs' cursors), one ``running`` update and one final update -- three row
changes per fire plus a jobs row. Three phases of ``--phase`` seconds:

1. exporter off: the writer's transaction times (the fire path's cost);
2. exporter on (``cronman audit export`` to a local directory, its own
   process): it drains the backlog of phase 1 -- export throughput;
3. exporter on, caught up: the writer's transaction times again, and the
   commit-to-object lag (the exporter's histogram).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.ids import run_id_for  # noqa: E402
from cronman.models import Run, RunUpdate  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.timeutil import utcnow  # noqa: E402
from tests.support.pg_server import private_postgres  # noqa: E402
from tests.support.store_data import job_spec  # noqa: E402

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def histogram_p(metrics: dict[str, float], base: dict[str, float], p: float) -> float | None:
    """The upper bound of the bucket holding the p-th percentile (window delta)."""
    prefix = "cronman_audit_export_lag_seconds_bucket{le=\""
    buckets = sorted((float(k[len(prefix):-2]), v - base.get(k, 0.0))
                     for k, v in metrics.items() if k.startswith(prefix))
    total = buckets[-1][1] if buckets else 0
    for bound, count in buckets:
        if total and count >= p / 100 * total:
            return bound
    return None


class Writer:
    """Fire-like writes at a steady rate; records each transaction's time."""

    def __init__(self, url: str, fires: int, jobs: list[str]) -> None:
        self.store = open_store(url)
        self.fires = fires
        self.jobs = jobs
        self.times: list[float] = []
        self.done = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        per_tick = max(1, self.fires // 10)
        tick = 0
        next_at = time.monotonic()
        base = utcnow().replace(microsecond=0)
        pending: list[RunUpdate] = []
        while not self.stop.is_set():
            next_at += 0.1
            tick += 1
            t = base + timedelta(milliseconds=tick * 100)
            runs = [Run(id=run_id_for(self.jobs[(tick * per_tick + i) % len(self.jobs)], t),
                        job_id=self.jobs[(tick * per_tick + i) % len(self.jobs)],
                        scheduled_for=t, status="claimed", node_id="bench", claimed_at=t,
                        lease_expires_at=t + timedelta(seconds=30)) for i in range(per_tick)]
            cursors = [(r.job_id, t, 0) for r in runs]
            self._timed(self.store.runs.claim_runs, runs, cursors)
            now = utcnow()
            self._timed(self.store.runs.write_run_updates,
                        [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="running",
                                   attempt=1, started_at=now) for r in runs], "bench")
            if pending:
                self._timed(self.store.runs.write_run_updates, pending, "bench")
            pending = [RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status="succeeded",
                                 finished_at=now, duration_ms=5, result={"http_status": 204})
                       for r in runs]
            self.done += len(runs)
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _timed(self, fn: Any, *args: Any) -> None:
        start = time.perf_counter()
        fn(*args)
        with self.lock:
            self.times.append(time.perf_counter() - start)

    def take(self) -> tuple[list[float], int]:
        with self.lock:
            times, self.times = self.times, []
        done, self.done = self.done, 0
        return times, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fires", type=int, default=1000, help="fires per second")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--phase", type=float, default=20.0, help="seconds per phase")
    ap.add_argument("--flush-seconds", type=float, default=1.0,
                    help="the exporter's CRONMAN_AUDIT_FLUSH_SECONDS")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="cronman-audit-bench-"))
    with private_postgres(settings={"wal_level": "logical"}) as pg:
        url = pg.create_database("bench")
        upgrade(url)
        store = open_store(url)
        jobs = []
        for start in range(0, args.jobs, 1000):
            jobs += [j.id for j in store.jobs.create_jobs(
                [job_spec(f"b{i}") for i in range(start, min(args.jobs, start + 1000))])]
        store.close()
        port = 19000 + os.getpid() % 1000
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
        env.update(CRONMAN_DATABASE_URL=url, CRONMAN_AUDIT_URL=str(out / "trail"),
                   CRONMAN_AUDIT_FLUSH_SECONDS=str(args.flush_seconds),
                   PYTHONUNBUFFERED="1")
        # The slot exists before the load: the exporter then only catches up.
        subprocess.run(CRONMAN + ["audit", "status"], env=env, check=True,
                       capture_output=True)
        from cronman.audit.settings import AUDITED_TABLES, AuditSettings
        from cronman.audit.slot import ChangeSlot, connect

        conn = connect(url, "bench")
        ChangeSlot(conn, AuditSettings().slot, AuditSettings().publication,
                   AUDITED_TABLES).ensure()
        conn.close()
        writer = Writer(url, args.fires, jobs)
        thread = threading.Thread(target=writer.run, daemon=True)
        thread.start()
        time.sleep(3)
        writer.take()
        time.sleep(args.phase)
        off_times, off_done = writer.take()
        log = open(out / "exporter.log", "wb")  # noqa: SIM115
        exporter = subprocess.Popen(CRONMAN + ["audit", "export", "--metrics-port", str(port),
                                               "--metrics-host", "127.0.0.1"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        caught_up = None
        drained_changes = 0.0
        while time.monotonic() - started < args.phase * 3:
            time.sleep(0.5)
            try:
                m = scrape(port)
            except OSError:
                continue
            changes = sum(v for k, v in m.items()
                          if k.startswith("cronman_audit_exported_changes_total"))
            last = m.get("cronman_audit_last_exported_commit_timestamp_seconds", 0)
            if caught_up is None and last and time.time() - last < 2.0:
                caught_up = time.monotonic() - started
                drained_changes = changes
                break
        writer.take()
        m0 = scrape(port)
        time.sleep(args.phase)
        on_times, on_done = writer.take()
        m1 = scrape(port)
        writer.stop.set()
        thread.join(10)
        exporter.terminate()
        exporter.wait(15)

        def summary(times: list[float], done: int) -> dict[str, float | None]:
            return {"fires_per_s": round(done / args.phase, 1),
                    "txn_ms_p50": round(1000 * (pct(times, 50) or 0), 2),
                    "txn_ms_p99": round(1000 * (pct(times, 99) or 0), 2),
                    "txn_ms_max": round(1000 * max(times), 2) if times else None}

        changes_on = sum(v - m0.get(k, 0) for k, v in m1.items()
                         if k.startswith("cronman_audit_exported_changes_total"))
        result = {
            "fires_per_s_asked": args.fires, "flush_seconds": args.flush_seconds,
            "fire_path_exporter_off": summary(off_times, off_done),
            "fire_path_exporter_on": summary(on_times, on_done),
            "backlog_drain": {"seconds": round(caught_up, 1) if caught_up else None,
                              "changes": drained_changes,
                              "changes_per_s": round(drained_changes / caught_up)
                              if caught_up else None},
            "steady_export_changes_per_s": round(changes_on / args.phase),
            "commit_to_object_lag_s": {"p50_bucket": histogram_p(m1, m0, 50),
                                       "p99_bucket": histogram_p(m1, m0, 99)},
            "objects": sum(1 for _ in (out / "trail").rglob("*.parquet")),
        }
        print(json.dumps(result, indent=2))
        (out / "result.json").write_text(json.dumps(result, indent=2))
        print(f"logs in {out}")


if __name__ == "__main__":
    main()
