#!/usr/bin/env python
"""Container jobs end to end: a scheduler node, worker agents, a real containerd.

    .venv/bin/python ops/bench/agent_bench.py                       # every scenario
    .venv/bin/python ops/bench/agent_bench.py --scenario rate --jobs 20 --every 2 --duration 30

Everything runs on this machine: a private containerd (its own config and
dirs under a temp dir, stopped by PID), the busybox test image (built and
imported), a throw-away PostgreSQL database and Redis db, one ``cronman
scheduler`` and ``cronman agent --runtime containerd`` processes. Figures come
from the run records (``result.container_started_at`` - ``scheduled_for``)
and the agents' logs:

- ``rate``: J interval jobs every S seconds (``true``), phases spread: J/S
  launches per second offered for ``--duration`` seconds on one agent;
  launches/s sustained (containers that ran in the window) and fire ->
  container-start latency p50/p99.
- ``concurrent``: N jobs due in the same second, each ``sleep 5``, on one
  agent: how many ran at once, all succeeded.
- ``kill``: two agents, N jobs ``sleep 4`` due over a few seconds; one agent
  SIGKILLed while its containers run and started again 1 s later (within the
  lease): lost runs and runs started twice (both should be 0). Then again
  with the agent not coming back: its runs are re-dispatched to the other
  agent after the lease (second starts, expected), none lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.callbacks.validation import validate_target  # noqa: E402
from cronman.models import RunFilter  # noqa: E402
from cronman.store import open_store  # noqa: E402
from cronman.store.migrate import upgrade  # noqa: E402
from cronman.timeutil import parse_rfc3339, to_ms, utcnow  # noqa: E402
from cronman.worker_agent.runtimes.containerd import ContainerdRuntime  # noqa: E402
from tests.support.containerd import (  # noqa: E402
    TEST_IMAGE,
    ContainerdServer,
    build_busybox_image,
)
from tests.support.databases import temporary_pg_database, temporary_redis_db  # noqa: E402
from tests.support.processes import Processes  # noqa: E402
from tests.support.store_data import job_spec  # noqa: E402

STARTED = re.compile(r"run (\S+) attempt (\d+): container \S+ started")
LEASE = 5


class Rig:
    def __init__(self, workdir: Path, db_url: str, redis_url: str,
                 containerd: ContainerdServer, namespace: str) -> None:
        self.workdir = workdir
        self.db_url = db_url
        self.store = open_store(db_url)
        self.procs = Processes(workdir)
        self.env = {"CRONMAN_REDIS_URL": redis_url,
                    "CRONMAN_REDIS_KEY_PREFIX": f"b{uuid.uuid4().hex[:8]}",
                    "CRONMAN_LEASE_SECONDS": str(LEASE), "CRONMAN_HEARTBEAT_TTL": str(LEASE),
                    "CRONMAN_CONTAINERD_ADDRESS": containerd.socket,
                    "CRONMAN_CONTAINERD_NAMESPACE": namespace,
                    "CRONMAN_AGENT_STATE_DIR": str(containerd.dir / "fifos"),
                    "CRONMAN_AGENT_SLOTS": "200"}

    def __enter__(self) -> Rig:
        self.procs.__enter__()
        self.procs.scheduler(self.db_url, "bench-node", env=self.env)
        return self

    def __exit__(self, *exc: object) -> None:
        self.procs.__exit__(*exc)
        self.store.close()

    def agent(self, agent_id: str) -> Any:
        return self.procs.agent(agent_id, redis_url=self.env["CRONMAN_REDIS_URL"], env=self.env)

    def jobs(self, specs: list[dict[str, Any]]) -> list[Any]:
        out = []
        for i in range(0, len(specs), 500):
            out += self.store.jobs.create_jobs(specs[i:i + 500])
        return out

    def runs(self, job_ids: list[str]) -> list[Any]:
        out = []
        for job_id in job_ids:
            out += self.store.runs.list_runs(job_id, RunFilter(), 1000, None).items
        return out

    def starts(self) -> list[tuple[str, int]]:
        found = []
        for p in self.procs.started:
            if p.argv[3:4] == ["agent"]:
                found += [(m.group(1), int(m.group(2))) for m in STARTED.finditer(p.log_text())]
        return found


def target(command: list[str], **kw: Any) -> dict[str, Any]:
    return validate_target({"kind": "container", "image": TEST_IMAGE, "command": command,
                            "cpu": kw.pop("cpu", 0.01), "memory_mb": kw.pop("memory_mb", 16),
                            "timeout": kw.pop("timeout", 60), **kw})


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def wait_all_final(rig: Rig, job_ids: list[str], count: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        runs = rig.runs(job_ids)
        final = [r for r in runs if r.status in ("succeeded", "failed", "lost")]
        if len(final) >= count or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def scenario_rate(rig: Rig, jobs: int, every: float, duration: float) -> dict[str, Any]:
    rig.agent("bench-a1")
    now = utcnow()
    start = now + timedelta(seconds=3)
    anchor = start.replace(microsecond=0)
    specs = [job_spec(f"rate-{i}", target=target(["true"]),
                      schedule={"kind": "interval", "every": every,
                                "anchor": (anchor + timedelta(seconds=every * i / jobs)).isoformat()},
                      start_at=start.isoformat(),
                      end_at=(start + timedelta(seconds=duration)).isoformat())
             for i in range(jobs)]
    created = rig.jobs(specs)
    offered = jobs / every
    time.sleep(3 + duration)
    owed = int(duration / every) * jobs
    runs = wait_all_final(rig, [j.id for j in created], owed, 60)
    ok = [r for r in runs if r.status == "succeeded"]
    lat = [to_ms(parse_rfc3339(r.result["container_started_at"])) - to_ms(r.scheduled_for)
           for r in ok if r.result and r.result.get("container_started_at")]
    window_end = start + timedelta(seconds=duration)
    on_time = [r for r in ok if r.result.get("container_finished_at")
               and parse_rfc3339(r.result["container_finished_at"]) <= window_end
               + timedelta(seconds=1)]
    return {"scenario": "rate", "jobs": jobs, "every_s": every, "offered_per_s": offered,
            "duration_s": duration, "runs": len(runs), "succeeded": len(ok),
            "failed": sum(r.status == "failed" for r in runs),
            "launches_per_s": round(len(on_time) / duration, 2),
            "latency_ms_p50": pct(lat, 0.5), "latency_ms_p99": pct(lat, 0.99),
            "latency_ms_max": max(lat) if lat else None}


def scenario_concurrent(rig: Rig, count: int) -> dict[str, Any]:
    rig.agent("bench-c1")
    at = (utcnow() + timedelta(seconds=3)).replace(microsecond=0) + timedelta(seconds=1)
    created = rig.jobs([job_spec(f"conc-{i}", target=target(["sleep", "5"]),
                                 schedule={"kind": "once", "at": at.isoformat()})
                        for i in range(count)])
    runs = wait_all_final(rig, [j.id for j in created], count, 90)
    ok = [r for r in runs if r.status == "succeeded"]
    events = []
    for r in ok:
        events.append((parse_rfc3339(r.result["container_started_at"]), 1))
        events.append((parse_rfc3339(r.result["container_finished_at"]), -1))
    running = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    lat = [to_ms(parse_rfc3339(r.result["container_started_at"])) - to_ms(r.scheduled_for)
           for r in ok]
    return {"scenario": "concurrent", "containers": count, "succeeded": len(ok),
            "peak_running_at_once": peak, "last_start_after_due_ms": max(lat) if lat else None}


def scenario_kill(rig: Rig, count: int, come_back: bool) -> dict[str, Any]:
    a1 = rig.agent("bench-k1")
    rig.agent("bench-k2")
    base = utcnow() + timedelta(seconds=3)
    created = rig.jobs([job_spec(f"kill-{i}-{come_back}", target=target(["sleep", "4"]),
                                 schedule={"kind": "once",
                                           "at": (base + timedelta(seconds=2 * i / count))
                                           .isoformat()})
                        for i in range(count)])
    time.sleep(3 + 2 + 1)
    a1.kill()
    if come_back:
        time.sleep(1)
        rig.agent("bench-k1")
    runs = wait_all_final(rig, [j.id for j in created], count, 60 + 4 * LEASE)
    ids = {r.id for r in runs}
    starts = [s for s in rig.starts() if s[0] in ids]
    per_run: dict[str, int] = {}
    for run_id, _ in starts:
        per_run[run_id] = per_run.get(run_id, 0) + 1
    return {"scenario": "kill" if come_back else "kill-no-return", "runs": count,
            "succeeded": sum(r.status == "succeeded" for r in runs),
            "lost": count - sum(r.status == "succeeded" for r in runs),
            "started_twice": sum(1 for n in per_run.values() if n > 1),
            "redispatched": sum(1 for r in runs if r.attempt > 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", choices=["rate", "concurrent", "kill", "all"], default="all")
    ap.add_argument("--jobs", type=int, default=20, help="rate: interval jobs")
    ap.add_argument("--every", type=float, default=2.0, help="rate: their interval (s)")
    ap.add_argument("--duration", type=float, default=30.0, help="rate: seconds measured")
    ap.add_argument("--concurrent", type=int, default=50, help="concurrent: containers")
    ap.add_argument("--kill-runs", type=int, default=10, help="kill: runs")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="cronman-agent-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "containerd").mkdir()
        containerd = ContainerdServer(workdir / "containerd")
        containerd.start()
        try:
            namespace = f"bench{uuid.uuid4().hex[:6]}"
            image = build_busybox_image(workdir / "busybox.tar")

            async def load() -> None:
                rt = ContainerdRuntime(containerd.socket, namespace,
                                       state_dir=containerd.dir / "fifos")
                try:
                    await rt.import_image(image)
                finally:
                    await rt.close()

            asyncio.run(load())
            todo = [args.scenario] if args.scenario != "all" else ["rate", "concurrent", "kill"]
            for name in todo:
                with temporary_pg_database("cronman_bench") as db, temporary_redis_db() as rurl:
                    upgrade(db)
                    logs = workdir / name
                    logs.mkdir()
                    with Rig(logs, db, rurl, containerd, namespace) as rig:
                        if name == "rate":
                            results.append(scenario_rate(rig, args.jobs, args.every,
                                                         args.duration))
                        elif name == "concurrent":
                            results.append(scenario_concurrent(rig, args.concurrent))
                        else:
                            results.append(scenario_kill(rig, args.kill_runs, True))
                    print(json.dumps(results[-1]), flush=True)
                    if name == "kill":
                        (workdir / "kill2").mkdir()
                        with Rig(workdir / "kill2", db, rurl, containerd, namespace) as rig:
                            results.append(scenario_kill(rig, args.kill_runs, False))
                        print(json.dumps(results[-1]), flush=True)
        finally:
            containerd.stop()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
