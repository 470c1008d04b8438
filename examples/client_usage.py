"""The Python client: create a job, read it back, trigger it, list its runs.

    pip install cronman
    CRONMAN_URL=http://127.0.0.1:8080 python examples/client_usage.py https://example.com/hook

Prints one JSON object with what it did; deletes the job at the end.
"""

from __future__ import annotations

import json
import sys
import time

from cronman.client import ConflictError, CronmanClient


def main() -> None:
    target_url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9000/hook"
    with CronmanClient.from_env() as api:
        spec = {"name": f"example-{int(time.time() * 1000)}", "namespace": "examples",
                "schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin"},
                "target": {"kind": "http", "url": target_url, "body": '{"hello": "world"}',
                           "headers": {"Content-Type": "application/json"}},
                "labels": {"owner": "examples"}}
        job = api.create_job(spec)
        try:
            api.create_job(spec)
        except ConflictError as exc:  # the name is taken in its namespace
            conflict = f"{exc.code}: {exc.message} ({exc.field})"
        nexts = api.next_fire_times(job["id"], count=3)
        paused = api.pause_job(job["id"])
        # Concurrent edits: the PUT carries the version read; a stale one gets a 409.
        changed = api.update_job(job["id"], {"priority": 5}, version=paused["version"])
        try:
            api.update_job(job["id"], {"priority": 6}, version=paused["version"])
            stale = "accepted"
        except ConflictError:
            stale = "refused"
        run = api.trigger_job(job["id"])
        runs = list(api.iter_job_runs(job["id"]))
        listed = [j["name"] for j in api.iter_jobs(namespace="examples",
                                                    labels={"owner": "examples"})]
        api.delete_job(job["id"])
        print(json.dumps({"job_id": job["id"], "conflict": conflict, "next": nexts,
                          "priority": changed["priority"], "stale_update": stale,
                          "triggered": run["id"], "runs": [r["id"] for r in runs],
                          "listed": job["name"] in listed}))


if __name__ == "__main__":
    main()
