#!/usr/bin/env python
"""How late a process that does nothing but wait for a timer wakes up.

    .venv/bin/python ops/bench/timer_probe.py --out probe.log &   # beside a benchmark
    kill %1

Sleeps ``--interval`` ms at a time and logs, every ``--window`` ticks, the
p50 / p90 / p99 / max of how long after its deadline each tick ran. Run
beside ``cronman bench --scenario overload``, it is the floor the machine
sets: the cheapest wake-up the kernel can give while the scheduler nodes,
PostgreSQL, Redis and the receiver share its cores. A scheduler's own
lateness cannot be expected below it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cronman_bench.report import percentile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=10.0, help="ms between ticks")
    ap.add_argument("--window", type=int, default=400, help="ticks per logged line")
    ap.add_argument("--out", default="-", help="log file (default: stdout)")
    args = ap.parse_args()
    out = sys.stdout if args.out == "-" else open(args.out, "w")  # noqa: SIM115
    interval = args.interval / 1000.0
    started = time.monotonic()
    late_ms: list[float] = []
    deadline = time.monotonic() + interval
    while True:
        wait = deadline - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic()
        late_ms.append((now - deadline) * 1000.0)
        deadline = now + interval
        if len(late_ms) == args.window:
            late_ms.sort()
            p50, p90, p99 = (percentile(late_ms, q) or 0.0 for q in (50, 90, 99))
            print(f"{now - started:8.1f} s  late ms  p50 {p50:6.2f}  p90 {p90:6.2f}  "
                  f"p99 {p99:6.2f}  max {late_ms[-1]:6.2f}", file=out, flush=True)
            late_ms = []


if __name__ == "__main__":
    main()
