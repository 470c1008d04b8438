#!/usr/bin/env python3
"""This machine's backend limits, for ``membership_sim.py``: what one Redis and
one PostgreSQL sustain.

    flock /work/wt/bench.lock .venv/bin/python ops/bench/backend_limits.py

- Redis (a private ``redis-server``, ``redis-benchmark``): plain ``SET``
  commands/s, pipelined; and calls/s of ``pulse.lua`` itself with the keys of
  N nodes' pulses (a node's pulse writes its own and reads every peer's),
  which says how many nodes one shard's pulses can carry;
- PostgreSQL (a scratch database on ``--admin-url``'s server, ``pgbench``):
  commits/s of one-row updates (``pgbench -N``) from ``--clients`` clients.

pgbench runs ``--seconds``; redis-benchmark ``--requests`` requests. Prints
one line per figure.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy.engine import make_url  # noqa: E402

from cronman_bench.services import PrivateRedis, ScratchDatabase  # noqa: E402

PULSE_LUA = (Path(__file__).resolve().parents[2] / "cronman" / "coordination"
             / "pulse.lua")


def redis_rate(port: int, args: list[str], requests: int, clients: int = 4,
               pipeline: int = 1) -> float:
    """Requests/s redis-benchmark reports (``-q``: one line, "... N requests per second")."""
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(requests), "-c",
                          str(clients), "-P", str(pipeline), "-q", *args],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    rates = re.findall(r"([\d.]+) requests per second", out)
    if not rates:
        raise RuntimeError(f"redis-benchmark said: {out!r}")
    return float(rates[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--nodes", default="3,10,50,100")
    ap.add_argument("--seconds", type=int, default=10, help="pgbench run length")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=400_000,
                    help="redis-benchmark requests for SET (and / N for N keys' pulses)")
    args = ap.parse_args()
    for tool in ("redis-benchmark", "pgbench"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")

    redis = PrivateRedis().start()
    try:
        port = redis.port
        set_rate = redis_rate(port, ["-t", "set"], args.requests, pipeline=16)
        print(f"redis SET, pipelined 16: {set_rate:,.0f} commands/s")
        script = PULSE_LUA.read_text()
        for n in (int(x) for x in args.nodes.split(",")):
            keys = [f"p:{{b}}:pulse:node-{i}" for i in range(n)]
            calls = redis_rate(port, ["EVAL", script, str(n), *keys, "x" * 60, "3000"],
                               max(200, args.requests // n))
            print(f"redis pulse.lua with {n} keys: {calls:,.0f} calls/s "
                  f"(a cluster of {n} pulses {n * 10:,} calls/s: "
                  f"{100 * n * 10 / calls:.1f} % of one shard)")
    finally:
        if redis.proc is not None:
            redis.proc.stop()

    db = ScratchDatabase(args.admin_url, prefix="cronman_limits").create()
    try:
        url = make_url(db.url)
        conn = ["-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
                "-U", url.username or "postgres"]
        subprocess.run(["pgbench", *conn, "-i", "-q", "-s", "1", db.name], check=True,
                       capture_output=True, timeout=300)
        out = subprocess.run(["pgbench", *conn, "-N", "-c", str(args.clients), "-j", "2",
                              "-T", str(args.seconds), db.name], capture_output=True,
                             text=True, check=True, timeout=args.seconds + 120).stdout
        tps = re.findall(r"tps = ([\d.]+)", out)
        print(f"postgresql pgbench -N, {args.clients} clients: {float(tps[-1]):,.0f} commits/s")
    finally:
        db.drop()


if __name__ == "__main__":
    main()
