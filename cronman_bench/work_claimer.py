"""A claiming process of the work-queue scenario (``python -m cronman_bench.work_claimer``).

Raw claim loops through the light client's calls (``CronmanClient.claim``,
``heartbeat``, ``complete``), so that what is measured is the server, not a
worker's own pacing. Each thread is a worker of its own (``worker_id``
``<name>-<thread>``). Every event is one JSON line on ``--out`` (flushed as
written, so a SIGKILLed process leaves what it saw):

- ``claim`` mode: claim with a long-poll, write ``{"ev": "claim", "t", "sched",
  "run", "ms"}`` (``t``: Unix ms when the answer came; ``ms``: the call's
  duration), hand the run to a reporting thread (``succeeded``), claim again
  (``--max`` N: up to N runs a call, each logged with the call's ``batch``);
  an empty answer that came early (the API had no long-poll to spare) is
  followed by the client ``Worker``'s pause, unless ``--spin``;
- ``hold`` mode: claim up to ``--hold`` runs and keep them, then heartbeat each
  every ``--period`` seconds (spread evenly over the period), writing
  ``{"ev": "hb", "t", "ms", "ok"}`` per heartbeat and ``{"ev": "held", ...}``
  per claim (with its lease's expiry after each heartbeat in ``kill`` use).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from cronman.client import NO_RETRY, CronmanClient
from cronman.client.types import Claim
from cronman.client.worker import EARLY_PAUSE
from cronman.errors import CronmanError
from cronman.timeutil import parse_rfc3339

COMPLETERS = 2  # claim mode: threads reporting the claimed runs


def _ms(text: str | None) -> int | None:
    if not text:
        return None
    return int(parse_rfc3339(text).timestamp() * 1000)


class Log:
    """JSON lines, one writer at a time, flushed per line."""

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.lock = threading.Lock()

    def write(self, **event: Any) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self.lock:
            self.fh.write(line)
            self.fh.flush()


def _now_ms() -> int:
    return int(time.time() * 1000)


def complete_loop(client: CronmanClient, todo: queue.Queue[tuple[str, str]], log: Log) -> None:
    """Report runs ``succeeded`` off the claim loop (a worker claims its next run
    while it reports the last)."""
    while True:
        run_id, token = todo.get()
        try:
            client.complete(run_id, token, "succeeded", retry=NO_RETRY)
        except CronmanError as exc:
            log.write(ev="error", t=_now_ms(), error=str(exc)[:200])


def claim_loop(client: CronmanClient, args: argparse.Namespace, worker_id: str, log: Log,
               stop: threading.Event, todo: queue.Queue[tuple[str, str]]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            claims = take(client, args, worker_id, args.max, slots=args.max)
        except CronmanError as exc:
            log.write(ev="error", t=_now_ms(), error=str(exc)[:200])
            time.sleep(0.05)
            continue
        t = _now_ms()
        if not claims:
            took = time.perf_counter() - t0
            log.write(ev="empty", t=t, ms=round(took * 1000, 2))
            # As the client's Worker does: an API with no long-poll to spare answers
            # at once; pause rather than spin (``--spin`` measures the spinning).
            if not args.spin and took < args.wait / 2:
                stop.wait(random.uniform(EARLY_PAUSE / 2, EARLY_PAUSE))
            continue
        ms = round((time.perf_counter() - t0) * 1000, 2)
        for claim in claims:
            run = claim["run"]
            log.write(ev="claim", t=t, sched=_ms(run["scheduled_for"]), run=run["id"],
                      handoff=_ms(run["started_at"]), attempt=claim["attempt"], ms=ms,
                      batch=len(claims))
            if not args.no_complete:
                todo.put((run["id"], claim["lease_token"]))


def take(client: CronmanClient, args: argparse.Namespace, worker_id: str, most: int, *,
         slots: int) -> list[Claim]:
    """One claim call: one run (``most`` 1, the single answer) or up to ``most``."""
    if most == 1:
        claim = client.claim(args.queue, worker_id, namespace=args.namespace,
                             wait=args.wait, slots=slots, retry=NO_RETRY)
        return [] if claim is None else [claim]
    return client.claim_many(args.queue, worker_id, most=most, namespace=args.namespace,
                             wait=args.wait, slots=slots, retry=NO_RETRY)


def hold_loop(client: CronmanClient, args: argparse.Namespace, worker_id: str, log: Log,
              stop: threading.Event, share: int, claimed_all: Callable[[], None]) -> None:
    held: list[tuple[str, str]] = []
    while len(held) < share and not stop.is_set():
        t0 = time.perf_counter()
        try:
            claims = take(client, args, worker_id, min(args.max, share - len(held)),
                          slots=share)
        except CronmanError as exc:
            log.write(ev="error", t=_now_ms(), error=str(exc)[:200])
            time.sleep(0.05)
            continue
        if not claims:
            stop.wait(0.05)
            continue
        ms = round((time.perf_counter() - t0) * 1000, 2)
        for claim in claims:
            run = claim["run"]
            held.append((run["id"], claim["lease_token"]))
            log.write(ev="held", t=_now_ms(), run=run["id"], sched=_ms(run["scheduled_for"]),
                      ms=ms, batch=len(claims))
    claimed_all()
    if not held:
        return
    step = args.period / len(held)
    start = time.monotonic()
    k = 0
    while not stop.is_set():
        run_id, token = held[k % len(held)]
        due = start + k * step
        delay = due - time.monotonic()
        if delay > 0 and stop.wait(delay):
            return
        t0 = time.perf_counter()
        try:
            ack = client.heartbeat(run_id, token, retry=NO_RETRY)
            log.write(ev="hb", t=_now_ms(), ms=round((time.perf_counter() - t0) * 1000, 2),
                      lag=round(max(0.0, time.monotonic() - due) * 1000, 1), ok=True,
                      run=run_id, expires=_ms(ack["lease_expires_at"]))
        except CronmanError as exc:
            log.write(ev="hb", t=_now_ms(), ms=round((time.perf_counter() - t0) * 1000, 2),
                      ok=False, run=run_id, error=str(exc)[:200])
        k += 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--api", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--namespace", default="default")
    p.add_argument("--name", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--wait", type=float, default=5.0)
    p.add_argument("--mode", choices=("claim", "hold"), default="claim")
    p.add_argument("--no-complete", action="store_true")
    p.add_argument("--spin", action="store_true",
                   help="claim again at once after an early empty answer")
    p.add_argument("--max", type=int, default=1,
                   help="runs one claim call takes at most (1: the single-run answer)")
    p.add_argument("--hold", type=int, default=1, help="hold: runs to claim in all")
    p.add_argument("--period", type=float, default=10.0, help="hold: seconds between beats")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(args.out, "a", encoding="utf-8") as fh, \
            CronmanClient(args.api, retry=NO_RETRY, timeout=30,
                          pool_size=args.threads + COMPLETERS) as client:
        log = Log(fh)
        remaining = [args.threads]
        lock = threading.Lock()

        def claimed_all() -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    log.write(ev="all_held", t=_now_ms())

        todo: queue.Queue[tuple[str, str]] = queue.Queue()
        for _ in range(COMPLETERS if args.mode == "claim" else 0):
            threading.Thread(target=complete_loop, args=(client, todo, log), daemon=True).start()
        threads = []
        for n in range(args.threads):
            wid = f"{args.name}-{n}"
            if args.mode == "claim":
                t = threading.Thread(target=claim_loop, args=(client, args, wid, log, stop, todo),
                                     name=wid, daemon=True)
            else:
                share = args.hold // args.threads + (1 if n < args.hold % args.threads else 0)
                t = threading.Thread(target=hold_loop, name=wid, daemon=True, args=(
                    client, args, wid, log, stop, share, claimed_all))
            t.start()
            threads.append(t)
        while not stop.is_set() and any(t.is_alive() for t in threads):
            stop.wait(0.2)
        # Every event is on disk already; a long-poll in flight is not waited for.


if __name__ == "__main__":
    main()
