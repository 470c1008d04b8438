#!/usr/bin/env python3
"""API benchmark: `cronman api` under gunicorn on a scratch PostgreSQL database.

Measures, through HTTP on loopback:

- job creates per second through single ``POST /v1/jobs`` calls, with
  ``--clients`` requests in flight (an aiohttp client, one process);
- job creates per second through ``POST /v1/jobs/bulk`` (1000 jobs a call,
  ``--bulk-clients`` calls in flight);
- latency of ``GET /v1/jobs/{id}`` (p50, p99) with ``--stored`` jobs in the
  database (topped up through the bulk endpoint), one request in flight, and
  throughput with ``--clients`` in flight.

Each measurement is repeated ``--repeat`` times; medians are printed (and
the single runs with ``--verbose``). The client shares the machine's cores
with the server: on a small machine keep ``--clients`` modest and say so.

    nice .venv/bin/python ops/bench/api_bench.py --workers 4 --threads 4

The scratch database is created on ``--admin-url``'s server and dropped at
the end (``--keep`` keeps it). Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cronman.store.migrate import upgrade  # noqa: E402
from tests.support.api import running_api  # noqa: E402
from tests.support.databases import temporary_pg_database  # noqa: E402

BULK_SIZE = 1000


def job(name: str, i: int) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": f"bench-{i % 10}",
        "schedule": {"kind": "cron", "cron": f"{i % 60} * * * *", "timezone": "Europe/Berlin"},
        "target": {"kind": "http", "url": "https://hooks.example.com/bench",
                   "headers": {"Authorization": "Bearer bench-secret-value"},
                   "body": '{"kind": "bench"}'},
        "labels": {"bench": "yes", "shard": str(i % 16)},
    }


async def _pool(n: int, in_flight: int, fn: Any) -> list[float]:
    """Run ``fn(i)`` for i in range(n) with ``in_flight`` at once; per-call seconds."""
    latencies: list[float] = []
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            t0 = time.perf_counter()
            await fn(i)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies


async def single_creates(session: aiohttp.ClientSession, base: str, tag: str, n: int,
                         in_flight: int) -> float:
    async def create(i: int) -> None:
        async with session.post(f"{base}/v1/jobs", json=job(f"{tag}-{i}", i)) as resp:
            if resp.status != 201:
                raise RuntimeError(f"POST /v1/jobs: {resp.status} {await resp.text()}")
            await resp.read()

    t0 = time.perf_counter()
    await _pool(n, in_flight, create)
    return n / (time.perf_counter() - t0)


async def bulk_creates(session: aiohttp.ClientSession, base: str, tag: str, n: int,
                       in_flight: int) -> tuple[float, list[str]]:
    batches = max(1, n // BULK_SIZE)
    ids: list[str] = []

    async def create(b: int) -> None:
        body = {"jobs": [job(f"{tag}-{b}-{k}", b * BULK_SIZE + k) for k in range(BULK_SIZE)]}
        data = json.dumps(body)
        async with session.post(f"{base}/v1/jobs/bulk", data=data,
                                headers={"Content-Type": "application/json"}) as resp:
            if resp.status != 201:
                raise RuntimeError(f"POST /v1/jobs/bulk: {resp.status} {await resp.text()}")
            ids.extend(j["id"] for j in (await resp.json())["items"])

    t0 = time.perf_counter()
    await _pool(batches, in_flight, create)
    return batches * BULK_SIZE / (time.perf_counter() - t0), ids


async def reads(session: aiohttp.ClientSession, base: str, ids: list[str], n: int,
                in_flight: int) -> tuple[list[float], float]:
    rng = random.Random(n * 31 + in_flight)

    async def get(_: int) -> None:
        async with session.get(f"{base}/v1/jobs/{rng.choice(ids)}") as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET /v1/jobs/{{id}}: {resp.status}")
            await resp.read()

    t0 = time.perf_counter()
    lat = await _pool(n, in_flight, get)
    return lat, n / (time.perf_counter() - t0)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def bench(base: str, args: argparse.Namespace) -> dict[str, Any]:
    # Shorter than the server's keep-alive (5 s), so no request meets a closed socket.
    conn = aiohttp.TCPConnector(limit=max(args.clients, args.bulk_clients) + 4,
                                keepalive_timeout=3)
    timeout = aiohttp.ClientTimeout(total=300)
    results: dict[str, list[float]] = {k: [] for k in (
        "single_creates_per_s", "bulk_creates_per_s", "get_p50_ms", "get_p99_ms",
        "get_per_s")}
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        # Warm-up: workers import, connection pools fill.
        await single_creates(session, base, "warm", 200, args.clients)
        ids: list[str] = []
        for r in range(args.repeat):
            rate = await single_creates(session, base, f"s{r}", args.single, args.clients)
            results["single_creates_per_s"].append(rate)
            rate, new = await bulk_creates(session, base, f"b{r}", args.bulk, args.bulk_clients)
            results["bulk_creates_per_s"].append(rate)
            ids += new
            print(f"run {r + 1}: single {results['single_creates_per_s'][-1]:.0f}/s, "
                  f"bulk {rate:.0f}/s", flush=True)
        stored = 200 + args.repeat * (args.single + args.bulk)
        topped = 0
        while stored < args.stored:
            n = min(20 * BULK_SIZE, args.stored - stored)
            _, new = await bulk_creates(session, base, f"fill{topped}", n, args.bulk_clients)
            ids += new
            stored += len(new)
            topped += 1
            print(f"stored {stored} jobs", flush=True)
        for r in range(args.repeat):
            lat, _ = await reads(session, base, ids, args.reads, 1)
            results["get_p50_ms"].append(pct(lat, 50) * 1000)
            results["get_p99_ms"].append(pct(lat, 99) * 1000)
            _, rate = await reads(session, base, ids, args.reads, args.clients)
            results["get_per_s"].append(rate)
            print(f"run {r + 1}: GET p50 {results['get_p50_ms'][-1]:.2f} ms, "
                  f"p99 {results['get_p99_ms'][-1]:.2f} ms, {rate:.0f}/s at "
                  f"{args.clients} in flight", flush=True)
    return {"stored_jobs": stored, "runs": results,
            "median": {k: round(statistics.median(v), 2) for k, v in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8, help="requests in flight")
    parser.add_argument("--bulk-clients", type=int, default=2)
    parser.add_argument("--single", type=int, default=2000, help="single POSTs per run")
    parser.add_argument("--bulk", type=int, default=20_000, help="jobs per bulk run")
    parser.add_argument("--stored", type=int, default=100_000,
                        help="jobs stored before the GET latency runs")
    parser.add_argument("--reads", type=int, default=2000, help="GETs per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()

    with temporary_pg_database(prefix="cronman_apibench") as url:
        upgrade(url)
        print(f"scratch database {url}; gunicorn gthread, {args.workers} workers x "
              f"{args.threads} threads; {os.cpu_count()} cores; client: aiohttp, "
              f"{args.clients} in flight", flush=True)
        with running_api(url, workers=args.workers, threads=args.threads,
                         startup_timeout=60) as base:
            report = asyncio.run(bench(base, args))
        report["config"] = {"workers": args.workers, "threads": args.threads,
                            "clients": args.clients, "bulk_clients": args.bulk_clients,
                            "cores": os.cpu_count()}
        print(json.dumps(report, indent=2))
        if args.keep:
            input(f"kept {url}; press Enter to drop it ")


if __name__ == "__main__":
    main()
