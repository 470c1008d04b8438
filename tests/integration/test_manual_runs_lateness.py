"""Manual runs are not lateness, on SQLite and PostgreSQL: a replay of an
hour-old run and a backfill of past fire times, carried out by a real node,
keep their origin, have their lateness measured from their request, and are
left out of ``/v1/stats/runs`` and the lateness histograms; the schedule's
own late fires (a ``fire_all`` catch-up) stay counted."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta

from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.memory import InProcessCoordinator
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.processes.api import make_app
from cronman.scheduler.node import SchedulerNode
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import job_spec

CATCH_UP_WAIT = 3.5  # seconds between the job's creation and the node's start
REQUEST_BOUND_MS = 10_000  # a manual run's lateness from its request, generously


def nearest_rank(values: list[int], p: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[max(1, math.ceil(p * len(values))) - 1]


def old_run(store, job_id: str, t) -> str:
    """A run of the schedule at ``t``, finished on time (3 ms late)."""
    run = Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="claimed",
              attempt=1, node_id="gone", claimed_at=t, lease_expires_at=t)
    assert store.runs.claim_runs([run]) == {run.id}
    store.runs.write_run_updates([RunUpdate(
        id=run.id, scheduled_for=t, status="succeeded", started_at=t, lateness_ms=3,
        finished_at=t + timedelta(milliseconds=20), duration_ms=17,
        result={"http_status": 204})])
    return run.id


def test_replay_and_backfill_are_not_lateness(store, database_url):
    client = make_app(Settings(database_url=database_url), store=store).test_client()
    resp = client.post("/v1/jobs", json=job_spec(
        "every-second", schedule={"kind": "cron", "cron": "* * * * * *", "timezone": "UTC"},
        misfire={"policy": "fire_all", "grace": 1}))
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    an_hour_ago = utcnow().replace(microsecond=0) - timedelta(hours=1)
    replayed = old_run(store, job["id"], an_hour_ago)
    backfill = {"since": format_rfc3339(an_hour_ago - timedelta(seconds=10)),
                "until": format_rfc3339(an_hour_ago - timedelta(seconds=8))}
    time.sleep(CATCH_UP_WAIT)  # nobody owns the job: its first fire times go by

    registry = CollectorRegistry()
    node = SchedulerNode(Settings(node_id="n1", heartbeat_ttl=2.0, replicas=1), store,
                         InProcessCoordinator(ttl=2.0), TargetRegistry([RecordingTarget()]),
                         registry=registry, run_maintenance=False)

    def runs() -> list[dict]:
        body = client.get(f"/v1/jobs/{job['id']}/runs?limit=1000").get_json()
        return body["items"]

    def done(origin: str) -> list[dict]:
        return [r for r in runs() if r["origin"] == origin and r["status"] == "succeeded"]

    async def until(check, what: str, task: asyncio.Task) -> None:
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(check):
            assert time.monotonic() < deadline, what
            if task.done():
                task.result()
            await asyncio.sleep(0.1)

    async def main() -> None:
        task = asyncio.create_task(node.main())
        try:
            await until(lambda: len(done("schedule")) >= 6, "scheduled fires", task)
            got = await asyncio.to_thread(client.post, f"/v1/runs/{replayed}/replay")
            assert got.status_code == 202, got.get_json()
            got = await asyncio.to_thread(client.post, f"/v1/jobs/{job['id']}/backfill",
                                          json=backfill)
            assert got.status_code == 202 and got.get_json()["requested"] == 3, got.get_json()
            await until(lambda: len(done("replay")) == 1 and len(done("backfill")) == 3,
                        "the replay and the backfill carried out", task)
        finally:
            node.request_stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())

    items = runs()
    by_origin: dict[str, list[dict]] = {}
    for r in items:
        by_origin.setdefault(r["origin"], []).append(r)
    assert set(by_origin) == {"schedule", "replay", "backfill"}, set(by_origin)
    # The run JSON says what each run is; a manual run's lateness is its wait
    # since it was requested, not its age.
    [replay] = by_origin["replay"]
    assert replay["id"] == replayed and replay["attempt"] == 2
    for r in by_origin["replay"] + by_origin["backfill"]:
        assert 0 <= r["lateness_ms"] < REQUEST_BOUND_MS, r
    scheduled = [r for r in by_origin["schedule"] if r["lateness_ms"] is not None]
    # The catch-up of the fire times missed before the node started is the
    # schedule's own lateness: it must be seen.
    assert max(r["lateness_ms"] for r in scheduled) >= 1000, scheduled

    # /v1/stats/runs (what the console plots): only the schedule's runs.
    stats = client.get("/v1/stats/runs?since=-2h&step=60").get_json()
    step = timedelta(seconds=stats["step_seconds"])
    fired = 0
    for b in stats["buckets"]:
        lo = parse_rfc3339(b["t"])
        inside = [r for r in items if lo <= parse_rfc3339(r["scheduled_for"]) < lo + step]
        late = [r["lateness_ms"] for r in inside
                if r["origin"] == "schedule" and r["lateness_ms"] is not None]
        assert b["lateness_p99_ms"] == nearest_rank(late, 0.99), (b, inside)
        assert b["lateness_p50_ms"] == nearest_rank(late, 0.5), (b, inside)
        assert b["fires"] == len(inside)  # manual runs are fires all the same
        fired += b["fires"]
    assert fired == len(items)

    # The histograms see the schedule's first attempts only.
    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    started_here = [r for r in scheduled if r["node_id"] == "n1"]
    count = sample("cronman_fire_lateness_seconds_count")
    assert count == len(started_here), (count, len(started_here))
    assert sample("cronman_fire_lateness_seconds_bucket", le="10.0") == count
    assert sample("cronman_namespace_fire_lateness_seconds_count",
                  namespace="default") == count
    # ... and every fire is counted as one, by origin.
    assert sample("cronman_fires_total", origin="replay") == 1
    assert sample("cronman_fires_total", origin="backfill") == 3
    assert sample("cronman_namespace_fires_total", namespace="default") == len(items)
