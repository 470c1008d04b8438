#!/usr/bin/env python3
"""The worker calls' cost in one process: claim, heartbeat and complete
through the API app (Flask's test client, no HTTP server) on a scratch
PostgreSQL database, one call at a time.

``--runs`` worker runs are handed to a queue as a node does (the run row
claimed, then enqueued), claimed ``--max`` a call (1: the single-run
answer), heartbeated twice each and completed. For each call: the calls
made, wall ms and CPU ms (this process: Flask, SQLAlchemy, psycopg2; not
PostgreSQL's) per call and per run. What it isolates is the API's own
work per call, which the ``work-queue`` scenario of ``cronman bench``
measures only through gunicorn on a shared machine.

    .venv/bin/python ops/bench/work_calls_bench.py --runs 200 --max 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.config import Settings  # noqa: E402
from cronman.processes.api import make_app  # noqa: E402
from cronman.store import open_store  # noqa: E402
from tests.integration.test_api_work import WORKER, fire  # noqa: E402
from tests.support.api import job_spec  # noqa: E402
from tests.support.databases import migrated_pg_database  # noqa: E402


def measure(runs: int, most: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with migrated_pg_database("cronman_wcb") as url:
        store = open_store(url)
        try:
            client = make_app(Settings(database_url=url), store=store).test_client()
            specs = [job_spec(name=f"w{i}", target=WORKER) for i in range(runs)]
            for job in client.post("/v1/jobs/bulk", json={"jobs": specs}).get_json()["items"]:
                fire(store, job)
            held: list[tuple[str, str]] = []

            def claims() -> int:
                calls = 0
                while len(held) < runs:
                    body: dict[str, Any] = {"worker_id": f"w{calls % 4}", "wait": 0,
                                            "slots": 1000}
                    if most > 1:
                        body["max"] = most
                    answer = client.post("/v1/queues/spark/claim", json=body).get_json()
                    calls += 1
                    for c in answer["claims"] if most > 1 else [answer]:
                        held.append((c["run"]["id"], c["lease_token"]))
                return calls

            def each(call: str, body: dict[str, Any]) -> Callable[[], int]:
                def run() -> int:
                    for run_id, token in held:
                        resp = client.post(f"/v1/runs/{run_id}/{call}",
                                           json={"lease_token": token, **body})
                        assert resp.status_code == 200, resp.get_data(as_text=True)
                    return len(held)
                return run

            for name, fn in (("claim", claims), ("heartbeat", each("heartbeat", {})),
                             ("heartbeat_again", each("heartbeat", {})),
                             ("complete", each("complete", {"status": "succeeded"}))):
                t0, c0 = time.perf_counter(), time.process_time()
                calls = fn()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                out[name] = {"calls": calls, "wall_ms_per_call": round(wall / calls * 1000, 2),
                             "cpu_ms_per_call": round(cpu / calls * 1000, 2),
                             "cpu_ms_per_run": round(cpu / runs * 1000, 2)}
        finally:
            store.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--max", type=int, default=1, help="runs a claim call takes (1..100)")
    args = p.parse_args()
    print(json.dumps(measure(args.runs, args.max), indent=1))


if __name__ == "__main__":
    main()
