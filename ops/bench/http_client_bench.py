#!/usr/bin/env python
"""CPU per request of the HTTP clients a node could fire with: aiohttp vs cronman's own.

    .venv/bin/python ops/bench/http_client_bench.py                  # N=5000, K=32, 5 runs
    .venv/bin/python ops/bench/http_client_bench.py -n 20000 -k 8 -k 128 --runs 7

Each trial fires N POSTs at a private nginx receiver (cronman_bench.receiver,
answering 204 on loopback) with K in flight, in a fresh worker process, and
reports that process's CPU microseconds per request (user + system, from
``time.process_time``; the receiver's CPU is not counted) and requests per
second. Clients, each on asyncio's default loop and on uvloop:

- ``aiohttp``: a ClientSession set up as the http target had it before
  (TCPConnector limit 512, keep-alive 30 s, DNS cache, no cookies, no
  proxies), one ``session.request`` per call with the same per-call work as
  the target (headers dict with the four ``Cronman-*`` headers, a
  ``ClientTimeout``, redirects off, status and at most 1 KiB of the body);
- ``httpclient``: :class:`cronman.callbacks.httpclient.HttpClient` with a
  request prepared once and the four ``Cronman-*`` headers per call;
- ``target``: the whole per-fire path, ``HttpTarget.deliver`` (on the new
  client): preparing-cache lookup, headers, the request, the ``Outcome``.

Every trial opens its connections during a warm-up of ``--warmup`` requests
that is not measured. Trials run in rounds, each round every variant once
(the order rotating), so a busy machine weighs on all of them alike; the
table shows medians over the rounds and the ratio to aiohttp on asyncio's
loop from the same run. The figures are the client's cost on this machine;
a shared machine moves the absolute numbers, the ratios hold better.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CLIENTS = ("aiohttp", "httpclient", "target")
LOOPS = ("asyncio", "uvloop")
BODY = b'{"kind":"bench","payload":"0123456789abcdef"}'
WHEN = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


# -- worker: one trial in this process -----------------------------------------------


async def _aiohttp_trial(url: str, n: int, k: int, warmup: int) -> tuple[float, float, int]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=30.0,
                                     ttl_dns_cache=10)
    session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                    headers={"User-Agent": "cronman/0.1"}, trust_env=False,
                                    raise_for_status=False)
    static = {"Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=10)
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        headers = static.copy()
        headers["Cronman-Job-Id"] = f"job-{i}"
        headers["Cronman-Run-Id"] = f"run-{i}"
        headers["Cronman-Scheduled-For"] = "2026-11-22T07:00:00Z"
        headers["Cronman-Attempt"] = "1"
        try:
            async with session.request("POST", url, headers=headers, data=BODY,
                                       timeout=timeout, allow_redirects=False) as resp:
                if not resp.content.at_eof():
                    await resp.content.read(1024)
                if resp.status != 204:
                    errors += 1
        except aiohttp.ClientError:
            errors += 1

    try:
        return (*await _measure(one, n, k, warmup), errors)
    finally:
        await session.close()


async def _httpclient_trial(url: str, n: int, k: int, warmup: int) -> tuple[float, float, int]:
    from cronman.callbacks.http import DEFAULT_HEADERS
    from cronman.callbacks.httpclient import HttpClient, HttpClientError, PreparedRequest

    client = HttpClient(guard=False, pool_limit=512, keepalive_timeout=30.0)
    request = PreparedRequest("POST", url, headers={"Content-Type": "application/json"},
                              body=BODY, default_headers=DEFAULT_HEADERS)
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        headers = [("Cronman-Job-Id", f"job-{i}"), ("Cronman-Run-Id", f"run-{i}"),
                   ("Cronman-Scheduled-For", "2026-11-22T07:00:00Z"), ("Cronman-Attempt", "1")]
        try:
            response = await client.request(request, headers, timeout=10)
            if response.status != 204:
                errors += 1
        except HttpClientError:
            errors += 1

    try:
        return (*await _measure(one, n, k, warmup), errors)
    finally:
        await client.close()


async def _target_trial(url: str, n: int, k: int, warmup: int) -> tuple[float, float, int]:
    from cronman.callbacks import Delivery, validate_target
    from cronman.callbacks.http import HttpTarget
    from cronman.config import Settings

    target = HttpTarget(Settings(allow_private_targets=True))
    spec = validate_target({"kind": "http", "url": url, "body": BODY.decode(),
                            "headers": {"Content-Type": "application/json"}})
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        outcome = await target.deliver(Delivery(job_id=f"job-{i}", run_id=f"run-{i}",
                                                scheduled_for=WHEN, attempt=1, target=spec))
        if not outcome.ok:
            errors += 1

    try:
        return (*await _measure(one, n, k, warmup), errors)
    finally:
        await target.close()


async def _measure(one: Any, n: int, k: int, warmup: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) for ``n`` calls of ``one`` with ``k`` in flight."""

    async def lane(start: int, count: int) -> None:
        for i in range(start, start + count):
            await one(i)

    async def burst(total: int) -> None:
        per = [total // k + (1 if j < total % k else 0) for j in range(k)]
        starts = [sum(per[:j]) for j in range(k)]
        await asyncio.gather(*(lane(s, c) for s, c in zip(starts, per, strict=True)))

    await burst(max(warmup, k))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await burst(n)
    return time.process_time() - cpu0, time.perf_counter() - wall0


TRIALS = {"aiohttp": _aiohttp_trial, "httpclient": _httpclient_trial, "target": _target_trial}


def worker(args: argparse.Namespace) -> None:
    from cronman import eventloop

    trial = TRIALS[args.client](args.url, args.n, args.k[0], args.warmup)
    cpu, wall, errors = eventloop.run(trial, args.loop)
    print(json.dumps({"cpu_us_per_req": 1e6 * cpu / args.n, "req_per_s": args.n / wall,
                      "errors": errors}))


# -- parent: rounds of trials, medians, the table -----------------------------------------


def trial(url: str, client: str, loop: str, n: int, k: int, warmup: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--worker", "--client", client, "--loop", loop,
            "--url", url, "-n", str(n), "-k", str(k), "--warmup", str(warmup)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{client}/{loop} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000, help="requests per trial")
    ap.add_argument("-k", type=int, action="append", help="requests in flight (repeatable)")
    ap.add_argument("--runs", type=int, default=5, help="rounds (each variant once per round)")
    ap.add_argument("--warmup", type=int, default=500, help="unmeasured requests per trial")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--loops", default=",".join(LOOPS))
    ap.add_argument("--json", type=Path, default=None, help="write every trial here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--loop", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.k = args.k or [32]
    if args.worker:
        worker(args)
        return

    from cronman_bench.receiver import Receiver

    variants = [(c, lp) for c in args.clients.split(",") for lp in args.loops.split(",")]
    load_before = os.getloadavg()
    rx = Receiver().start()
    results: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    try:
        for k in args.k:
            for r in range(args.runs):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for client, loop in order:
                    res = trial(rx.url, client, loop, args.n, k, args.warmup)
                    results.setdefault((k, client, loop), []).append(res)
                    print(f"k={k} round {r + 1}/{args.runs} {client:<10} {loop:<7} "
                          f"{res['cpu_us_per_req']:7.1f} us/req {res['req_per_s']:8.0f} req/s"
                          f" errors={res['errors']}", file=sys.stderr, flush=True)
    finally:
        rx.stop()
        rx.cleanup()
    load_after = os.getloadavg()

    print(f"\nN={args.n} per trial, medians of {args.runs} rounds; "
          f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after (a shared machine: compare ratios)")
    for k in args.k:
        base = results.get((k, "aiohttp", "asyncio"))
        base_cpu = statistics.median(x["cpu_us_per_req"] for x in base) if base else None
        print(f"\nK={k} in flight")
        print("| client | loop | CPU µs/req | req/s | aiohttp+asyncio CPU ÷ this | errors |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for client, loop in variants:
            runs = results[(k, client, loop)]
            cpu = statistics.median(x["cpu_us_per_req"] for x in runs)
            rate = statistics.median(x["req_per_s"] for x in runs)
            ratio = f"{base_cpu / cpu:.2f}" if base_cpu else "-"
            print(f"| {client} | {loop} | {cpu:.1f} | {rate:,.0f} | {ratio} | "
                  f"{sum(x['errors'] for x in runs)} |")
    if args.json:
        args.json.write_text(json.dumps({
            "n": args.n, "runs": args.runs, "load_before": load_before, "load_after": load_after,
            "trials": [{"k": k, "client": c, "loop": lp, **x}
                       for (k, c, lp), xs in results.items() for x in xs],
        }, indent=2))


if __name__ == "__main__":
    main()
