#!/usr/bin/env python
"""Trigger latency: an upstream's success to its downstream's callback, at C chains/s.

    .venv/bin/python ops/bench/trigger_bench.py                      # 100 chains/s, 2 nodes
    .venv/bin/python ops/bench/trigger_bench.py --chains 20 --duration 20   # a smoke run

C chains, each an upstream interval job every S seconds (anchors spread: C/S
upstream fires per second) and a downstream job ``{"kind": "after", "jobs":
[upstream], "mode": "any"}``, on N scheduler nodes (PostgreSQL, a private
Redis), all calling a private nginx (cronman_bench.receiver) that logs
``$msec`` and the Cronman-* headers. The jobs are made through the API's own
code in-process on the scratch database.

For every downstream run made in the measured window (``gate.upstream``
names the upstream run it consumed):

- trigger latency: its first callback's arrival - the upstream run's callback's
  arrival (nginx answers at once: the upstream's success, give or take the
  node's reading of the answer);
- of which *made*: the downstream run's ``scheduled_for`` (the trigger's
  time, the database's clock, in the transaction writing the upstream's
  success) - the upstream's arrival: the result writer's batching;
- and *taken*: the downstream's arrival - its ``scheduled_for``: the change
  feed, a node taking the run and dispatching it;
- missed: upstream successes of the window no downstream run consumed;
  doubled: upstream successes consumed twice.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sqlalchemy import create_engine, text  # noqa: E402

from cronman.timeutil import now_ms, to_ms  # noqa: E402
from cronman_bench.procs import ManagedProcess, free_port  # noqa: E402
from cronman_bench.receiver import Receiver  # noqa: E402
from cronman_bench.services import PrivateRedis, ScratchDatabase  # noqa: E402

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]
ADMIN_URL = os.environ.get("CRONMAN_BENCH_ADMIN_URL",
                           "postgresql+psycopg2://postgres@127.0.0.1:5432/test")


def percentile(values: list[int], p: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(values: list[int]) -> dict[str, int | None]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "max": max(values) if values else None}


def create_chains(url: str, chains: int, every: float, target: str) -> tuple[list[str], list[str]]:
    """The chains' jobs through the API's code; (upstream ids, downstream ids)."""
    from cronman.api.app import create_app
    from cronman.config import Settings
    from cronman.store import open_store
    from cronman.timeutil import format_rfc3339, from_ms

    store = open_store(url)
    app = create_app(Settings(database_url=url, allow_private_targets=True), store=store)
    client = app.test_client()
    base = (now_ms() // 1000 + 3) * 1000
    step = every * 1000 / chains
    ups, downs = [], []
    try:
        for lo in range(0, chains, 500):
            part = range(lo, min(chains, lo + 500))
            specs = [{"name": f"up-{i:05d}", "namespace": "bench",
                      "schedule": {"kind": "interval", "every": every,
                                   "anchor": format_rfc3339(from_ms(int(base + i * step)))},
                      "target": {"kind": "http", "url": target + "/up"}} for i in part]
            specs += [{"name": f"down-{i:05d}", "namespace": "bench",
                       "schedule": {"kind": "after", "jobs": [f"up-{i:05d}"], "mode": "any"},
                       "target": {"kind": "http", "url": target + "/down"}} for i in part]
            resp = client.post("/v1/jobs/bulk", json={"jobs": specs})
            if resp.status_code != 201:
                raise SystemExit(f"creating the chains failed: {resp.get_json()}")
            items = resp.get_json()["items"]
            ups += [j["id"] for j in items[:len(part)]]
            downs += [j["id"] for j in items[len(part):]]
    finally:
        store.close()
    return ups, downs


def wait_ready(proc: ManagedProcess, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "ready: owns" in proc.log_tail(200_000):
            return
        if proc.exited():
            raise SystemExit(f"node exited:\n{proc.log_tail()}")
        time.sleep(0.2)
    raise SystemExit(f"node not ready in {timeout} s:\n{proc.log_tail()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", type=int, default=100)
    ap.add_argument("--every", type=float, default=1.0, help="seconds between upstream fires")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=None, help="directory for logs and results")
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="cronman-trigger-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    rx = Receiver(workdir=out / "nginx").start()
    db = ScratchDatabase(ADMIN_URL, prefix="cronman_trigbench").create()
    redis = PrivateRedis().start()
    nodes: list[ManagedProcess] = []
    try:
        from cronman.store.migrate import upgrade

        upgrade(db.url)
        ups, downs = create_chains(db.url, args.chains, args.every, rx.url)
        print(f"created {len(ups)} chains ({args.chains / args.every:.0f} chains/s)",
              flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
        env.update(CRONMAN_ALLOW_PRIVATE_TARGETS="true", PYTHONUNBUFFERED="1",
                   CRONMAN_REPLICAS=str(min(2, args.nodes)))
        for k in range(1, args.nodes + 1):
            argv = CRONMAN + ["scheduler", "--node-id", f"trig-{k}", "--database-url", db.url,
                              "--redis-url", redis.url, "--metrics-port", str(free_port()),
                              "--metrics-host", "127.0.0.1"]
            nodes.append(ManagedProcess(f"node-{k}", argv, log_path=out / f"node-{k}.log",
                                        env=env))
        for node in nodes:
            wait_ready(node)
        time.sleep(args.warmup)
        start_ms = now_ms()
        time.sleep(args.duration)
        end_ms = now_ms()
        time.sleep(3.0)  # the window's last chains finish
        rx.wait_flush()
        for node in nodes:
            node.stop(timeout=15)
        rx.stop()
        result = measure(db.url, rx, set(ups), set(downs), start_ms, end_ms)
        result.update(chains=args.chains, every_s=args.every, nodes=args.nodes,
                      chains_per_s=round(args.chains / args.every, 1),
                      window_s=round((end_ms - start_ms) / 1000, 1))
        print(json.dumps(result, indent=2))
        (out / "result.json").write_text(json.dumps(result, indent=2))
        print(f"logs and results in {out}")
    finally:
        for node in nodes:
            if not node.exited():
                node.stop(timeout=15, sig=signal.SIGTERM)
        rx.stop()
        redis.stop()
        db.drop()


def measure(url: str, rx: Receiver, ups: set[str], downs: set[str], start_ms: int,
            end_ms: int) -> dict[str, object]:
    arrived: dict[str, int] = {}
    for a in rx.arrivals():
        if a.run_id and (a.run_id not in arrived or a.arrived_ms < arrived[a.run_id]):
            arrived[a.run_id] = a.arrived_ms
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT id, job_id, scheduled_for, status, gate FROM scheduled_jobs "
            "WHERE scheduled_for >= to_timestamp(:lo / 1000.0) - interval '5 seconds'"),
            {"lo": start_ms}).all()
    engine.dispose()
    up_runs = {r.id: r for r in rows if r.job_id in ups and r.status == "succeeded"}
    total, made, taken = [], [], []
    consumed: dict[str, int] = {}
    for r in rows:
        if r.job_id not in downs or not r.gate:
            continue
        for u in r.gate.get("upstream", ()):
            consumed[u["run_id"]] = consumed.get(u["run_id"], 0) + 1
        first = r.gate["upstream"][0]["run_id"]
        up_at = arrived.get(first)
        if up_at is None or not start_ms <= up_at < end_ms:
            continue
        made_ms = to_ms(r.scheduled_for)
        made.append(made_ms - up_at)
        down_at = arrived.get(r.id)
        if down_at is not None:
            total.append(down_at - up_at)
            taken.append(down_at - made_ms)
    window = [rid for rid, r in up_runs.items()
              if rid in arrived and start_ms <= arrived[rid] < end_ms - 2000]
    return {
        "downstream_runs_measured": len(total),
        "trigger_latency_ms": summary(total),
        "made_ms (upstream callback -> downstream run written)": summary(made),
        "taken_ms (downstream run written -> its callback)": summary(taken),
        "upstream_successes_in_window": len(window),
        "missed": sum(1 for rid in window if rid not in consumed),
        "doubled": sum(1 for n in consumed.values() if n > 1),
        "downstream_without_callback": len(made) - len(total),
    }


if __name__ == "__main__":
    main()
