#!/usr/bin/env python
"""How much a scheduler node needs to hold many jobs, and how fast it loads them.

    .venv/bin/python ops/bench/node_memory.py --jobs 100000            # 1 node, no Redis
    .venv/bin/python ops/bench/node_memory.py --jobs 1000000 --nodes 3 # private Redis, R=2
    .venv/bin/python ops/bench/node_memory.py --jobs 100000 --nodes 3 --kill  # reconcile

Creates N jobs in a scratch PostgreSQL database with bulk SQL (one template
job validated by cronman, then ``INSERT ... SELECT generate_series``), then
starts ``cronman scheduler`` processes and reports, per node:

- ``ready_s``: launch to the "ready: owns N" log line (the initial load);
- ``settled_s`` (several nodes): launch to the last ownership change logged
  before the measurement ends;
- ``owned``: jobs owned at the end (from the node's ``owned_jobs`` gauge);
- ``hwm_mb`` / ``rss_mb``: VmHWM and VmRSS from /proc after ``--settle`` s;
- ``bytes_per_owned``: (VmRSS - the RSS of an idle node with no jobs) / owned.

The jobs are built so that the measurement is about holding, not firing:
anchors and cron times lie at least ten minutes ahead. The mix (by index):
60% interval with its own anchor, 10% interval sharing one anchor, 20% cron
``0 3 1 1 *`` (one expression), 10% cron ``H 3 1 1 *`` (job-dependent).
Half the targets share one URL, half have a URL of their own; every job has
two labels. Not a test: a measuring tool.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman_bench.procs import ManagedProcess, free_port  # noqa: E402
from cronman_bench.services import PrivateRedis, ScratchDatabase  # noqa: E402

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]
ADMIN_URL = os.environ.get("CRONMAN_BENCH_ADMIN_URL",
                           "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
EVERY_S = 30 * 86_400
READY = re.compile(r"ready: owns (\d+) of (\d+)")
OWNERSHIP = re.compile(r"ownership: (\d+) jobs gained, (\d+) dropped")
RECONCILED = re.compile(r"ownership reconciled: (\d+) gained jobs loaded (\d+) ms")


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS in kB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(rest.split()[0])
    return out


def gauge(url: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def create_jobs(url: str, count: int) -> float:
    """Create ``count`` jobs; returns the seconds it took."""
    import psycopg2

    from cronman.api.validation import validate_job
    from cronman.ids import new_job_id
    from cronman.store import open_store
    from cronman.timeutil import utcnow
    from cronman_bench.services import _psycopg2_kwargs

    started = time.monotonic()
    now = utcnow()
    template = validate_job({
        "name": "template", "namespace": "memory-bench",
        "schedule": {"kind": "cron", "cron": "0 3 1 1 *"},
        "target": {"kind": "http", "url": "http://127.0.0.1:9/shared", "timeout": 10},
        "labels": {"bench": "memory", "team": "t0"},
    }, job_id=new_job_id(), now=now)
    store = open_store(url)
    try:
        [tpl] = store.jobs.create_jobs([template])
    finally:
        store.close()
    cron_doc = json.dumps(tpl.schedule)
    conn = psycopg2.connect(**_psycopg2_kwargs(url))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("DELETE FROM jobs")
            # Anchors ten minutes ahead, spread over one interval.
            base_s = int(time.time()) + 600
            batch = 200_000
            for lo in range(0, count, batch):
                hi = min(count, lo + batch) - 1
                cur.execute(
                    """
                    INSERT INTO jobs (id, namespace, name, version, schedule, target, retry,
                        misfire, delivery, concurrency, priority, start_at, end_at, jitter,
                        paused, labels, dead_letter, created_at, updated_at, deleted_at,
                        change_seq, last_fire_at, skipped_pending)
                    SELECT
                        md5(i::text || %(salt)s)::uuid::text, 'memory-bench',
                        'mem-' || lpad(i::text, 8, '0'), 1,
                        CASE
                          WHEN i %% 10 < 6 THEN jsonb_build_object('kind', 'interval',
                            'every', %(every)s, 'anchor', to_char(to_timestamp(%(base)s
                              + (i::bigint * 7919) %% (%(every)s - 1200)) AT TIME ZONE 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                          WHEN i %% 10 = 6 THEN jsonb_build_object('kind', 'interval',
                            'every', %(every)s, 'anchor', to_char(to_timestamp(%(base)s)
                              AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                          WHEN i %% 10 < 9 THEN %(cron)s::jsonb
                          ELSE jsonb_set(%(cron)s::jsonb, '{cron}', '"H 3 1 1 *"')
                        END,
                        CASE WHEN i %% 2 = 0 THEN %(target)s::jsonb
                             ELSE jsonb_set(%(target)s::jsonb, '{url}',
                                            to_jsonb('http://127.0.0.1:9/hook/' || i))
                        END,
                        %(retry)s::jsonb, %(misfire)s::jsonb, %(delivery)s, %(concurrency)s,
                        0, NULL, NULL, NULL, false,
                        jsonb_build_object('bench', 'memory', 'team', 't' || (i %% 10)),
                        NULL, now(), now(), NULL, nextval('jobs_change_seq'), NULL, 0
                    FROM generate_series(%(lo)s, %(hi)s) AS i
                    """,
                    {"salt": str(base_s), "every": EVERY_S, "base": base_s, "cron": cron_doc,
                     "target": json.dumps(tpl.target), "retry": json.dumps(tpl.retry),
                     "misfire": json.dumps(tpl.misfire), "delivery": tpl.delivery,
                     "concurrency": tpl.concurrency, "lo": lo, "hi": hi})
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE jobs")
    finally:
        conn.close()
    return time.monotonic() - started


def start_nodes(url: str, count: int, replicas: int, redis_url: str | None, out: Path,
                extra_env: dict[str, str]) -> list[tuple[ManagedProcess, str, float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
    env.update(CRONMAN_ALLOW_PRIVATE_TARGETS="true", PYTHONUNBUFFERED="1",
               CRONMAN_REPLICAS=str(replicas), **extra_env)
    nodes = []
    for k in range(count):
        port = free_port()
        argv = CRONMAN + ["scheduler", "--node-id", f"mem-{k + 1}", "--database-url", url,
                          "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
        if redis_url:
            argv += ["--redis-url", redis_url]
        launched = time.monotonic()
        proc = ManagedProcess(f"node{k + 1}", argv, log_path=out / f"node{k + 1}.log", env=env)
        nodes.append((proc, f"http://127.0.0.1:{port}/metrics", launched))
    return nodes


def idle_rss_kb(url: str, out: Path) -> int:
    """The RSS of a node holding no jobs (the interpreter and its libraries)."""
    [(proc, _, _)] = start_nodes(url, 1, 1, None, out / "idle", {})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not READY.search(proc.log_tail(20_000)):
            time.sleep(0.2)
        time.sleep(2)
        return proc_status(proc.pid)["VmRSS"]
    finally:
        proc.stop(timeout=15)


def kill_last(nodes: list[tuple[ManagedProcess, str, float]], out: Path,
              ttl: float) -> list[dict[str, object]]:
    """SIGKILL the last node; per survivor, the jobs it gained and how long
    loading them took from the membership change (its own log line)."""
    before = [len(RECONCILED.findall((out / f"node{k + 1}.log").read_text(errors="replace")))
              for k in range(len(nodes) - 1)]
    victim = nodes[-1][0]
    killed_at = time.monotonic()
    victim.kill()
    found: dict[int, dict[str, object]] = {}
    deadline = killed_at + ttl + 60
    while len(found) < len(nodes) - 1 and time.monotonic() < deadline:
        for k in range(len(nodes) - 1):
            if k in found:
                continue
            lines = RECONCILED.findall((out / f"node{k + 1}.log").read_text(errors="replace"))
            if len(lines) > before[k]:
                gained, ms = lines[-1]
                found[k] = {"node": k + 1, "gained": int(gained), "reconcile_ms": int(ms),
                            "since_kill_s": round(time.monotonic() - killed_at, 1)}
        time.sleep(0.05)
    return [found.get(k, {"node": k + 1, "reconcile_ms": None}) for k in range(len(nodes) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds after the last node is ready before measuring")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-idle", action="store_true", help="skip the idle-node baseline")
    ap.add_argument("--kill", action="store_true",
                    help="after measuring, SIGKILL the last node and report how long the "
                         "others take to load the jobs they gain")
    ap.add_argument("--heartbeat-ttl", type=float, default=5.0,
                    help="CRONMAN_HEARTBEAT_TTL of the nodes (s)")
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="cronman-node-memory-"))
    (out / "idle").mkdir(parents=True, exist_ok=True)
    db = ScratchDatabase(ADMIN_URL, prefix="cronman_nodemem").create()
    redis: PrivateRedis | None = None
    nodes: list[tuple[ManagedProcess, str, float]] = []
    try:
        from cronman.store.migrate import upgrade

        upgrade(db.url)
        idle = 0 if args.no_idle else idle_rss_kb(db.url, out)
        created_s = create_jobs(db.url, args.jobs)
        print(f"created {args.jobs} jobs in {created_s:.1f} s; idle node RSS "
              f"{idle / 1024:.0f} MB", flush=True)
        if args.nodes > 1:
            redis = PrivateRedis().start()
        nodes = start_nodes(db.url, args.nodes, args.replicas if args.nodes > 1 else 1,
                            redis.url if redis else None, out,
                            {"CRONMAN_HEARTBEAT_TTL": str(args.heartbeat_ttl)})
        ready: dict[int, float] = {}
        deadline = time.monotonic() + args.timeout
        while len(ready) < len(nodes) and time.monotonic() < deadline:
            for k, (proc, _, launched) in enumerate(nodes):
                if k not in ready and READY.search(proc.log_tail(1_000_000)):
                    ready[k] = time.monotonic() - launched
                if proc.exited():
                    raise SystemExit(f"node {k + 1} exited:\n{proc.log_tail()}")
            time.sleep(0.1)
        if len(ready) < len(nodes):
            raise SystemExit("nodes not ready in time")
        time.sleep(args.settle)
        results = []
        for k, (proc, metrics, _launched) in enumerate(nodes):
            st = proc_status(proc.pid)
            owned = gauge(metrics, "cronman_owned_jobs")
            log_text = (out / f"node{k + 1}.log").read_text(errors="replace")
            changes = len(OWNERSHIP.findall(log_text))
            results.append({
                "node": k + 1, "ready_s": round(ready[k], 1),
                "owned": int(owned) if owned is not None else None,
                "ownership_changes": changes,
                "hwm_mb": round(st["VmHWM"] / 1024, 1), "rss_mb": round(st["VmRSS"] / 1024, 1),
                "bytes_per_owned": round((st["VmRSS"] - idle) * 1024 / owned)
                if owned and idle else None,
                "hwm_bytes_per_owned": round((st["VmHWM"] - idle) * 1024 / owned)
                if owned and idle else None,
            })
        report = {"jobs": args.jobs, "nodes": args.nodes,
                  "replicas": args.replicas if args.nodes > 1 else 1,
                  "idle_rss_mb": round(idle / 1024, 1), "create_s": round(created_s, 1),
                  "per_node": results}
        if args.kill and len(nodes) > 1:
            report["after_kill"] = kill_last(nodes, out, args.heartbeat_ttl)
        print(json.dumps(report, indent=2))
        (out / "result.json").write_text(json.dumps(report, indent=2))
        print(f"logs in {out}")
    finally:
        for proc, _, _ in nodes:
            if not proc.exited():
                proc.stop(timeout=20, sig=signal.SIGTERM)
        if redis is not None:
            redis.stop()
        db.drop()


if __name__ == "__main__":
    main()
