#!/usr/bin/env python
"""CPU per script call of the asyncio Redis clients a node could mark fires with.

    .venv/bin/python ops/bench/redis_client_bench.py            # N=20000, 5 rounds
    .venv/bin/python ops/bench/redis_client_bench.py -n 50000 --rounds 7 --batch 8

Each trial runs N calls of the coordinator's start script (``start.lua``, one
fresh key per call, as a node marks a fire started) on uvloop against a
private ``redis-server`` on loopback, ``--batch`` calls at a time, and
reports the client process's CPU microseconds per call (user + system, from
``time.process_time``; the server's CPU is not counted). Clients:

- ``redis-py``: ``redis.asyncio.Redis`` as the shards build it (no retries,
  1 s socket timeout, decoded replies) with the script registered on it;
- ``resp``: :class:`cronman.coordination.resp.RespConnection`, the lean
  pipelined connection the node uses for plain ``redis://`` shards.

Trials run in rounds, each round every client once (the order rotating); the
table shows medians over the rounds and the ratio to redis-py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aredis
import uvloop
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.coordination.redis_scripts import script_source  # noqa: E402
from cronman.coordination.resp import RespConnection, RespScript, resp_settings  # noqa: E402
from cronman_bench.services import PrivateRedis  # noqa: E402

Script = Callable[..., Awaitable[Any]]


async def _trial(script: Script, n: int, batch: int, tag: str) -> float:
    args = ["bench/1", 60_000]
    for i in range(100):  # warm-up: connect, load the script
        await script(keys=[f"warm:{tag}:{i}"], args=args)
    t0 = time.process_time()
    for start in range(0, n, batch):
        await asyncio.gather(*(script(keys=[f"{tag}:{i}"], args=args)
                               for i in range(start, min(n, start + batch))))
    return (time.process_time() - t0) / n * 1e6


async def _redis_py(url: str, n: int, batch: int, tag: str) -> float:
    client = aredis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5,
                                   retry=Retry(NoBackoff(), 0), decode_responses=True)
    try:
        return await _trial(client.register_script(script_source("start.lua")), n, batch, tag)
    finally:
        await client.aclose()


async def _resp(url: str, n: int, batch: int, tag: str) -> float:
    settings = resp_settings(url, connect_timeout=0.5, socket_timeout=1.0)
    assert settings is not None
    conn = RespConnection(settings)
    try:
        return await _trial(RespScript(conn, script_source("start.lua")), n, batch, tag)
    finally:
        await conn.aclose()


CLIENTS = {"redis-py": _redis_py, "resp": _resp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="calls per trial")
    parser.add_argument("--batch", type=int, default=1, help="calls in flight at once")
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in CLIENTS}
    names = list(CLIENTS)
    server = PrivateRedis().start()
    try:
        for r in range(opts.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                us = uvloop.run(CLIENTS[name](server.url, opts.n, opts.batch, f"{name}:{r}"))
                results[name].append(us)
    finally:
        server.stop()
    base = statistics.median(results["redis-py"])
    print(f"{'client':10} {'CPU us/call (median)':>22} {'vs redis-py':>12}   all rounds")
    for name, runs in results.items():
        med = statistics.median(runs)
        print(f"{name:10} {med:22.1f} {med / base:12.2f}   "
              + " ".join(f"{v:.1f}" for v in runs))


if __name__ == "__main__":
    main()
