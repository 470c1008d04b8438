"""``--scenario limit-accuracy``: how well N nodes hold a herd to a limit.

A herd of J jobs (1,000) due in one second calls one receiver, under one
limit on its host: ``--rate`` (100) starts a second and ``--concurrency``
(20) at once. 5 % of the jobs have a raised priority. The receiver (its own
process, ``counting_receiver``) answers each request after ``--answer-ms``
(200: 20 at once then allow 100 a second, so both bounds bind) and logs its
arrival and its answer. Each fault of ``--faults`` is a phase of its own,
from scratch (database, Redis, nodes, receiver), ``--runs`` times in turn:

- ``none``;
- ``node-killed``: node ``bench-2`` SIGKILLed once a third of the herd
  arrived (its slots are held until its heartbeat TTL; its waiting fires
  come back through the lease sweeper);
- ``redis-restarted``: the private redis-server SIGKILLed and started again
  empty at once;
- ``redis-away``: the same, started again ``REDIS_AWAY_S`` later (past the
  2 s the nodes wait for Redis: each counts on its fair share meanwhile).

Figures per phase, from the receiver's log: the most requests in any second
and in flight at once (goal: never above the limit); the share of the rate
used while fires waited (whole seconds from the herd's first arrival that
the nodes' ``cronman_limit_waiting`` gauge, scraped every ``SAMPLE_S``,
covers from end to end, the fault's seconds and what follows them left out;
goal: 95 %); fires delivered and missed, doubled (two first attempts, or two
runs, of one job's fire) and sent again (a later attempt of the same run);
the order: fires of the default priority that arrived before the last raised
one.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cronman.timeutil import now_ms
from cronman_bench import nodemetrics
from cronman_bench.counting_receiver import CountingReceiver, Request
from cronman_bench.harness import ceil_second
from cronman_bench.herd import HERD_EVERY_S
from cronman_bench.limit_figures import (
    max_in_any_second,
    max_in_flight,
    rate_used,
    waiting_spans,
)
from cronman_bench.procs import BenchError
from cronman_bench.scenarios import ScenarioParams
from cronman_bench.systems import BenchOptions, CronmanSystem
from cronman_bench.workload import Mix, Workload

FAULTS = ("none", "node-killed", "redis-restarted", "redis-away")
DEFAULT_JOBS = 1000
DEFAULT_RATE = 100.0
DEFAULT_CONCURRENCY = 20
DEFAULT_ANSWER_MS = 200
RAISED_PRIORITY = 5
RAISED_SHARE = 0.05
REDIS_AWAY_S = 5.0
SAMPLE_S = 0.25  # the nodes' waiting gauge is scraped this often
LIMIT_NAME = "receiver"


@dataclass(frozen=True)
class HerdSpec:
    """What every phase of the scenario runs."""

    jobs: int
    rate: float
    concurrency: int
    answer_ms: int
    lead_s: float

    @property
    def raised(self) -> int:
        return max(1, int(self.jobs * RAISED_SHARE))

    def workload(self, now: int) -> Mix:
        due = ceil_second(now + int(self.lead_s * 1000))
        every = HERD_EVERY_S * 1000
        return Mix((Workload(self.raised, every, due, spread=False, name="raised",
                             priority=RAISED_PRIORITY),
                    Workload(self.jobs - self.raised, every, due, spread=False, name="herd")))

    def limit(self) -> dict[str, Any]:
        return {"name": LIMIT_NAME, "match": {"host": "127.0.0.1"}, "rate": self.rate,
                "concurrency": self.concurrency}


def settle_s(fault: str, heartbeat_ttl: float) -> float:
    """Seconds after a fault's end left out of the rate used (docs/limits.md):
    a killed node's slots are held until its heartbeat TTL runs out; a Redis
    that came back empty grants nothing for a renewal interval (a quarter of
    the TTL, at most 2 s), the nodes' back-off from Redis (2 s) and a second,
    while the nodes tell it what they hold; a second more for the nodes to
    see it back."""
    if fault == "node-killed":
        return heartbeat_ttl + 1.0
    if fault in ("redis-restarted", "redis-away"):
        return min(2.0, max(heartbeat_ttl, 2.0) / 4) + 2.0 + 1.0 + 1.0
    return 0.0


def limit_accuracy(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    spec = HerdSpec(jobs=params.jobs or DEFAULT_JOBS, rate=params.rate or DEFAULT_RATE,
                    concurrency=params.limit_concurrency or DEFAULT_CONCURRENCY,
                    answer_ms=params.answer_ms if params.answer_ms is not None
                    else DEFAULT_ANSWER_MS,
                    lead_s=params.lead if params.lead is not None
                    else 20 + (params.jobs or DEFAULT_JOBS) / 1000)
    faults = params.faults or ("none",)
    for f in faults:
        if f not in FAULTS:
            raise BenchError(f"unknown fault {f!r} (choose from {', '.join(FAULTS)})")
    if "node-killed" in faults and opts.nodes < 2:
        raise BenchError("the node-killed fault needs at least 2 nodes")
    runs = params.runs or 1
    opts.echo(f"limit-accuracy: a herd of {spec.jobs:,} jobs ({spec.raised} raised) on "
              f"{opts.nodes} node(s), limit {spec.rate:g}/s and {spec.concurrency} at once, "
              f"answers after {spec.answer_ms} ms; faults {', '.join(faults)}, {runs} run(s)")
    phases = [herd_phase(opts, spec, fault, f"limacc-{n}-{fault}")
              for n in range(runs) for fault in faults]
    return {"scenario": "limit-accuracy",
            "params": {"jobs": spec.jobs, "raised": spec.raised, "rate": spec.rate,
                       "concurrency": spec.concurrency, "answer_ms": spec.answer_ms,
                       "lead_s": spec.lead_s, "nodes": opts.nodes, "faults": list(faults),
                       "runs": runs, "heartbeat_ttl_s": opts.heartbeat_ttl,
                       "lease_s": opts.lease_seconds},
            "phases": phases, "figures": summary(phases, faults), "table": table(phases)}


def herd_phase(opts: BenchOptions, spec: HerdSpec, fault: str, tag: str) -> dict[str, Any]:
    """One herd under one fault, from scratch; its figures."""
    receiver = CountingReceiver(opts.workdir / f"{tag}-receiver", spec.answer_ms).start()
    system = CronmanSystem(opts, tag, limits=[spec.limit()])
    try:
        w = spec.workload(now_ms())
        keys = system.prepare(w, receiver.url)
        system.start()
        due = w.parts[0].base_ms / 1000
        opts.echo(f"  [{tag}] {spec.jobs:,} jobs due {due - time.time():+.1f} s from now")
        watch = _watch(opts, system, receiver, spec, fault, due, tag)
        metrics = {name: sum(nodemetrics.total(s, name) for s in system.probe().values())
                   for name in ("cronman_limit_waits_total", "cronman_double_fires_total",
                                "cronman_limit_fair_share_total")}
    finally:
        system.teardown()
        receiver.stop()
    return figures_of(spec, fault, keys, watch, metrics, opts.heartbeat_ttl, due)


@dataclass
class Watched:
    requests: list[Request]
    waiting: list[tuple[float, float]]  # (time, fires waiting on the live nodes)
    fault_at: float | None
    fault_end: float | None
    timed_out: bool


def _watch(opts: BenchOptions, system: CronmanSystem, receiver: CountingReceiver,
           spec: HerdSpec, fault: str, due: float, tag: str) -> Watched:
    """Until every job's fire arrived (a second more, for a double to show):
    the fault applied once a third of the herd arrived, the waiting gauge
    sampled meanwhile."""
    herd_s = spec.jobs / spec.rate
    deadline = due + 3 * herd_s + 60 + (
        opts.lease_seconds + opts.heartbeat_ttl if fault == "node-killed" else 0) + (
        REDIS_AWAY_S if fault == "redis-away" else 0)
    fault_at: float | None = None
    fault_end: float | None = None
    waiting: list[tuple[float, float]] = []
    next_echo = time.time() + 1.0
    while True:
        requests = receiver.requests()
        arrived = len({r.job_id for r in requests})
        now = time.time()
        if arrived >= spec.jobs or now > deadline:
            break
        if fault != "none" and fault_at is None and arrived >= spec.jobs // 3:
            fault_at = now
            if fault == "node-killed":
                system.processes[1].kill()
            else:
                system.redis.kill()
                if fault == "redis-restarted":
                    system.redis.restart()
            if fault != "redis-away":
                fault_end = time.time()
            opts.echo(f"  [{tag}] {fault} after {arrived:,} fires")
        elif fault_at is not None and fault_end is None and now >= fault_at + REDIS_AWAY_S:
            system.redis.restart()
            fault_end = time.time()
            opts.echo(f"  [{tag}] redis back after {fault_end - fault_at:.1f} s")
        for p in system.processes:
            if p.exited() and p.killed_at is None:
                raise BenchError(f"{p.name} exited with {p.returncode}: {p.log_tail()}")
        asked = time.time()
        probe = system.probe()
        waiting.append(((asked + time.time()) / 2,
                        sum(nodemetrics.total(s, "cronman_limit_waiting")
                            for s in probe.values())))
        if now >= next_echo:
            next_echo = now + 1.0
            opts.echo(f"  [{tag}] {arrived:,}/{spec.jobs:,} fires arrived, "
                      f"{waiting[-1][1]:.0f} waiting")
        time.sleep(max(0.0, SAMPLE_S - (time.time() - now)))
    time.sleep(1.0)  # room for a double to show
    return Watched(receiver.requests(), waiting, fault_at, fault_end,
                   timed_out=time.time() > deadline)


def figures_of(spec: HerdSpec, fault: str, keys: Sequence[str], watch: Watched,
               metrics: dict[str, float], heartbeat_ttl: float, due: float
               ) -> dict[str, Any]:
    """A phase's figures from what the receiver saw and the gauge's samples."""
    requests = sorted(watch.requests, key=lambda r: r.arrived)
    by_job: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        by_job[r.job_id].append(r)
    owed = set(keys)
    delivered = owed & set(by_job)
    doubled = sum(1 for job in delivered
                  if len({r.run_id for r in by_job[job]}) > 1
                  or sum(1 for r in by_job[job] if r.attempt == 1) > 1)
    again = sum(1 for job in delivered if len(by_job[job]) > 1) - doubled
    raised = set(keys[:spec.raised])
    firsts = [r.job_id for r in requests if by_job[r.job_id][0] is r]
    last_raised = max((i for i, job in enumerate(firsts) if job in raised), default=None)
    left_out: list[tuple[float, float]] = []
    if watch.fault_at is not None:
        end = watch.fault_end if watch.fault_end is not None else watch.fault_at
        left_out.append((watch.fault_at, end + settle_s(fault, heartbeat_ttl)))
    arrivals = [r.arrived for r in requests]
    used = rate_used(arrivals, spec.rate, waiting_spans(watch.waiting), left_out)
    first = arrivals[0] if arrivals else None
    per_second = max_in_any_second(arrivals)
    in_flight = max_in_flight([(r.arrived, r.answered) for r in requests])
    return {
        "fault": fault,
        "requests": len(requests),
        "max_per_second": per_second,
        "max_in_flight": in_flight,
        "rate_used": used.to_dict(),
        "owed": len(owed), "delivered": len(delivered), "missed": len(owed - delivered),
        "doubled": doubled, "sent_again": again,
        "low_before_last_raised": None if last_raised is None
        else sum(1 for job in firsts[:last_raised] if job not in raised),
        "herd_s": round(arrivals[-1] - arrivals[0], 2) if arrivals else None,
        "first_after_due_s": None if first is None else round(first - due, 2),
        "fault_at_s": None if watch.fault_at is None or first is None
        else round(watch.fault_at - first, 2),
        "left_out_s": round(sum(b - a for a, b in left_out), 2),
        "limit_waits": metrics["cronman_limit_waits_total"],
        "fair_share_batches": metrics["cronman_limit_fair_share_total"],
        "node_double_fires": metrics["cronman_double_fires_total"],
        "timed_out": watch.timed_out,
        "above_limit": per_second > spec.rate or in_flight > spec.concurrency,
    }


def summary(phases: Sequence[dict[str, Any]], faults: Sequence[str]) -> dict[str, Any]:
    """Per fault: the worst of its runs (the most per second and in flight, the
    least rate used, with the median), and the counts summed."""
    out: dict[str, Any] = {}
    for fault in faults:
        mine = [p for p in phases if p["fault"] == fault]
        shares = [p["rate_used"]["share"] for p in mine if p["rate_used"]["share"] is not None]
        out[fault] = {
            "max_per_second": max(p["max_per_second"] for p in mine),
            "max_in_flight": max(p["max_in_flight"] for p in mine),
            "rate_used_min": min(shares) if shares else None,
            "rate_used_median": round(statistics.median(shares), 4) if shares else None,
            "delivered": sum(p["delivered"] for p in mine),
            "missed": sum(p["missed"] for p in mine),
            "doubled": sum(p["doubled"] for p in mine),
            "sent_again": sum(p["sent_again"] for p in mine),
            "low_before_last_raised_max": max(
                (p["low_before_last_raised"] for p in mine
                 if p["low_before_last_raised"] is not None), default=None),
            "above_limit": any(p["above_limit"] for p in mine),
        }
    return out


def table(phases: Sequence[dict[str, Any]]) -> str:
    lines = []
    for p in phases:
        share = p["rate_used"]["share"]
        lines.append(
            f"{p['fault']:15s} max/s {p['max_per_second']:4d}, in flight {p['max_in_flight']:3d}, "
            f"rate used {'-' if share is None else f'{share:.1%}'} "
            f"({p['rate_used']['seconds']} s counted, {p['left_out_s']:.1f} s left out); "
            f"delivered {p['delivered']:,}/{p['owed']:,}, doubled {p['doubled']}, "
            f"sent again {p['sent_again']}; low before the last raised "
            f"{'-' if p['low_before_last_raised'] is None else p['low_before_last_raised']}; "
            f"herd {p['herd_s']} s" + (" (timed out)" if p["timed_out"] else ""))
    return "\n".join(lines)
