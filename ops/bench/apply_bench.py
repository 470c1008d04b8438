#!/usr/bin/env python3
"""`cronman jobs apply` of N jobs from a folder: first apply, no-op re-apply, a 1 % edit.

The API runs under gunicorn (`cronman api`) on a scratch PostgreSQL database;
the folder holds one YAML file per job (cron and interval schedules, http
targets with a secret header, labels). Each apply is the real command, run as
a subprocess with the wall time measured around it, and its summary line is
printed. The client shares the machine's cores with the API and PostgreSQL.

    .venv/bin/python ops/bench/apply_bench.py --jobs 10000

Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.store.migrate import upgrade  # noqa: E402
from tests.support.api import running_api  # noqa: E402
from tests.support.databases import temporary_pg_database  # noqa: E402


def definition(i: int) -> dict[str, object]:
    schedule: dict[str, object]
    if i % 2:
        schedule = {"kind": "cron", "cron": f"{i % 60} {i % 24} * * *",
                    "timezone": "Europe/Berlin"}
    else:
        schedule = {"kind": "interval", "every": 300 + i % 600}
    return {"name": f"job-{i:06d}", "namespace": "bench",
            "schedule": schedule,
            "target": {"kind": "http", "url": f"https://hooks.example.com/{i}",
                       "headers": {"Authorization": "Bearer abcdefghijklmnop"},
                       "body": json.dumps({"job": i})},
            "labels": {"team": f"team-{i % 7}"}}


def apply(url: str, folder: Path, *extra: str) -> tuple[float, str]:
    env = {**os.environ, "CRONMAN_URL": url}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "cronman.cli", "jobs", "apply", "-f",
                          str(folder), "-q", *extra], env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if out.returncode != 0:
        raise SystemExit(f"apply failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return elapsed, out.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, temporary_pg_database("cronman_apply") as db:
        folder = Path(tmp) / "jobs"
        folder.mkdir()
        for i in range(args.jobs):
            (folder / f"job-{i:06d}.yaml").write_text(yaml.safe_dump(definition(i)))
        upgrade(db)
        with running_api(db, workers=args.workers, threads=args.threads) as url:
            first = apply(url, folder)
            again = apply(url, folder)
            edited = max(1, args.jobs // 100)
            for i in range(edited):
                path = folder / f"job-{i:06d}.yaml"
                spec = yaml.safe_load(path.read_text())
                spec["labels"]["edited"] = "yes-1"
                path.write_text(yaml.safe_dump(spec))
            edit = apply(url, folder)
            dry = apply(url, folder, "--dry-run")
    print(f"jobs: {args.jobs} (one YAML file each); API: gunicorn {args.workers}x"
          f"{args.threads} on PostgreSQL")
    for label, (seconds, summary) in (("first apply", first), ("no-op re-apply", again),
                                      (f"edit of {edited} files", edit),
                                      ("dry run after", dry)):
        print(f"{label:>20}: {seconds:6.2f} s  ({summary})")


if __name__ == "__main__":
    main()
