#!/usr/bin/env python
"""One scheduler node under a steady load, measured at the receiver.

    .venv/bin/python ops/bench/node_bench.py                     # PostgreSQL + Redis, 1 node
    .venv/bin/python ops/bench/node_bench.py --mode standalone   # cronman standalone on SQLite
    .venv/bin/python ops/bench/node_bench.py --profile 20        # then py-spy for 20 s

J interval jobs every S seconds (anchors spread: J/S fires per second) fire
at a private nginx (cronman_bench.receiver) that logs ``$msec`` and the
Cronman-* headers. After a warm-up, a window of ``--duration`` seconds is
measured:

- delivered fires/s: owed (job, fire time) pairs of the window that arrived;
- lateness p50/p99/max: first arrival ($msec) - Cronman-Scheduled-For;
- CPU seconds per 1,000 fires: utime+stime of the node process (/proc/PID/stat);
- commits per fire (PostgreSQL): pg_stat_database.xact_commit delta / fires.

With ``--profile N`` py-spy then records the node for N seconds and the top
functions by own time and by total time are printed (the raw collapsed stacks
are kept next to the results). This is a quick check of one node, not the
side-by-side benchmark (``cronman bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.timeutil import now_ms  # noqa: E402
from cronman_bench.jobs import create_jobs  # noqa: E402
from cronman_bench.procs import ManagedProcess, free_port, read_usage  # noqa: E402
from cronman_bench.receiver import Receiver  # noqa: E402
from cronman_bench.services import PrivateRedis, ScratchDatabase  # noqa: E402
from cronman_bench.workload import Workload  # noqa: E402

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]
ADMIN_URL = os.environ.get("CRONMAN_BENCH_ADMIN_URL",
                           "postgresql+psycopg2://postgres@127.0.0.1:5432/test")


def percentile(values: list[int], p: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def scrape(url: str | None) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text page."""
    import urllib.request

    if url is None:
        return {}
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values


def wait_ready(proc: ManagedProcess, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "ready: owns" in proc.log_tail(200_000):
            return
        if proc.exited():
            raise SystemExit(f"node exited:\n{proc.log_tail()}")
        time.sleep(0.2)
    raise SystemExit(f"node not ready in {timeout} s:\n{proc.log_tail()}")


def profile(pid: int, seconds: int, out: Path) -> list[str]:
    """py-spy record (raw collapsed stacks) and a short summary."""
    pyspy = Path(sys.executable).with_name("py-spy")
    raw = out / "profile.txt"
    subprocess.run([str(pyspy), "record", "-p", str(pid), "-d", str(seconds), "-r", "200",
                    "--format", "raw", "-o", str(raw), "--nonblocking", "--gil"],
                   check=True, capture_output=True)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        samples += n
        frames = stack.split(";")
        own[_short(frames[-1])] += n
        for f in set(_short(f) for f in frames):
            total[f] += n
    lines = [f"py-spy: {samples} samples over {seconds} s (200/s, only the thread holding "
             "the GIL)",
             "own time:"]
    lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in own.most_common(15)]
    lines.append("total time (in the function or below):")
    lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in total.most_common(30)]
    return lines


def _short(frame: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    marker = "site-packages/"
    if marker in path:
        path = path.split(marker, 1)[1]
    elif "/cronman/" in path:
        path = "cronman/" + path.split("/cronman/", 1)[1]
    else:
        path = os.path.basename(path)
    return f"{name} ({path})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("scheduler", "standalone"), default="scheduler")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=10, help="seconds")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--no-redis", action="store_true", help="scheduler mode without Redis")
    ap.add_argument("--profile", type=int, default=0, help="py-spy seconds after the window")
    ap.add_argument("--out", type=Path, default=None, help="directory for logs and results")
    ap.add_argument("--event-loop", choices=("auto", "uvloop", "asyncio"), default=None,
                    help="the node's CRONMAN_EVENT_LOOP (default: the node's own default)")
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="cronman-node-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    rx = Receiver(workdir=out / "nginx").start()
    db: ScratchDatabase | None = None
    redis: PrivateRedis | None = None
    node: ManagedProcess | None = None
    try:
        if args.mode == "scheduler":
            db = ScratchDatabase(ADMIN_URL, prefix="cronman_nodebench").create()
            url = db.url
        else:
            url = f"sqlite:///{out / 'cronman.db'}"
        from cronman.store.migrate import upgrade

        upgrade(url)
        w = Workload(count=args.jobs, every_ms=args.every * 1000,
                     base_ms=now_ms() // 1000 * 1000)
        t = time.monotonic()
        ids = create_jobs(url, w, rx.url, "node-bench", workdir=out)  # through the API
        index = {job_id: i for i, job_id in enumerate(ids)}
        print(f"created {len(ids)} jobs in {time.monotonic() - t:.1f} s "
              f"({w.rate:.0f} fires/s)", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONMAN_")}
        env.update(CRONMAN_ALLOW_PRIVATE_TARGETS="true", PYTHONUNBUFFERED="1")
        if args.event_loop:
            env["CRONMAN_EVENT_LOOP"] = args.event_loop
        metrics_url = None
        if args.mode == "scheduler":
            port = free_port()
            metrics_url = f"http://127.0.0.1:{port}/metrics"
            argv = CRONMAN + ["scheduler", "--node-id", "bench-1", "--database-url", url,
                              "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
            if not args.no_redis:
                redis = PrivateRedis().start()
                argv += ["--redis-url", redis.url]
        else:
            port = free_port()
            metrics_url = f"http://127.0.0.1:{port}/metrics"
            argv = CRONMAN + ["standalone", "--database-url", url, "--bind", f"127.0.0.1:{port}"]
        node = ManagedProcess("node", argv, log_path=out / "node.log", env=env)
        wait_ready(node)
        time.sleep(args.warmup)
        start_ms = now_ms()
        u0 = read_usage(node.pid)
        c0 = db.xact_commit() if db else None
        m0 = scrape(metrics_url)
        time.sleep(args.duration)
        end_ms = now_ms()
        u1 = read_usage(node.pid)
        c1 = db.xact_commit() if db else None
        m1 = scrape(metrics_url)
        prof = profile(node.pid, args.profile, out) if args.profile else []
        rx.wait_flush()
        node.stop(timeout=15)
        rx.stop()

        owed = set(w.expected(start_ms, end_ms))
        first: dict[tuple[int, int], int] = {}
        counts: Counter[tuple[int, int]] = Counter()
        for a in rx.arrivals():
            i = index.get(a.job_id)
            if i is None or a.scheduled_ms is None:
                continue
            key = (i, a.scheduled_ms)
            counts[key] += 1
            if key not in first or a.arrived_ms < first[key]:
                first[key] = a.arrived_ms
        delivered = [k for k in owed if k in first]
        late = [first[k] - k[1] for k in delivered]
        seconds = (end_ms - start_ms) / 1000
        cpu = (u1.cpu_s - u0.cpu_s) if u0 and u1 else None
        result = {
            "mode": args.mode + ("" if args.mode != "scheduler" or args.no_redis else "+redis"),
            "event_loop": args.event_loop or "default",
            "jobs": args.jobs, "every_s": args.every, "asked_fires_per_s": w.rate,
            "window_s": round(seconds, 2),
            "owed": len(owed), "delivered": len(delivered),
            "missed": len(owed) - len(delivered),
            "duplicated": sum(1 for k in owed if counts[k] > 1),
            "delivered_per_s": round(len(delivered) / seconds, 1),
            "lateness_ms": {"p50": percentile(late, 50), "p99": percentile(late, 99),
                            "max": max(late) if late else None},
            "cpu_s_per_1000_fires": round(1000 * cpu / len(delivered), 3)
            if cpu is not None and delivered else None,
            "cpu_share_of_one_core": round(cpu / seconds, 3) if cpu is not None else None,
            "peak_rss_mb": round(u1.peak_rss_kb / 1024, 1) if u1 else None,
            "commits_per_fire": round((c1 - c0) / len(delivered), 4)
            if c0 is not None and c1 is not None and delivered else None,
            "commits_per_s": round((c1 - c0) / seconds, 1) if c0 is not None else None,
            "claim_batches_per_s": round((m1.get("cronman_claim_batch_size_count", 0)
                                          - m0.get("cronman_claim_batch_size_count", 0))
                                         / seconds, 1),
            "lock_losses": m1.get("cronman_lock_losses_total", 0),
            "double_fires": m1.get("cronman_double_fires_total", 0),
        }
        print(json.dumps(result, indent=2))
        (out / "result.json").write_text(json.dumps(result, indent=2))
        if prof:
            print("\n".join(prof))
            (out / "profile-summary.txt").write_text("\n".join(prof))
        print(f"logs and results in {out}")
    finally:
        if node is not None and not node.exited():
            node.stop(timeout=15, sig=signal.SIGTERM)
        rx.stop()
        if redis is not None:
            redis.stop()
        if db is not None:
            db.drop()


if __name__ == "__main__":
    main()
