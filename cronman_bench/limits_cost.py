"""``--scenario limits``: the extra CPU per fire of 100 limits defined against
none, at a steady rate (1,000 jobs every 1 s by default).

Both sides run the same jobs, each labelled ``shard: j % 100``; the limited
side also has 100 limits, ``shard-k`` on the label ``shard:k`` (a rate and a
concurrency ten times above the shard's share: they never hold a fire, so
what is measured is the cost of holding fires to limits -- the counters'
round trips to Redis, the slots' releases and renewals -- not of waiting).
The sides alternate, from scratch each time (database, Redis, nodes,
receiver), ``--runs`` pairs; the figure is the median of the pairs' ratios
and of each side's CPU per fire (the nodes' and Redis'; PostgreSQL's split
out too), with the load average at the start and end.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from cronman_bench.harness import run_phase, steady_window
from cronman_bench.report import dig
from cronman_bench.scenarios import ScenarioParams
from cronman_bench.systems import BenchOptions, CronmanSystem
from cronman_bench.workload import Workload

LIMITS = 100
DEFAULT_JOBS = 1000
DEFAULT_DURATION = 30.0
DEFAULT_RUNS = 3
HEADROOM = 10  # each limit allows this many times its shard's fires


def shard_limits(per_limit_rate: float) -> list[dict[str, Any]]:
    """``LIMITS`` label limits ``shard-k`` on ``shard:k``, each of that rate."""
    return [{"name": f"shard-{k}", "match": {"label": f"shard:{k}"}, "rate": per_limit_rate,
             "concurrency": max(1, int(per_limit_rate))} for k in range(LIMITS)]


def _side(phase: dict[str, Any]) -> dict[str, Any]:
    kinds = dig(phase, "cost.cpu_ms_per_fire_by_kind") or {}
    return {"cpu_ms_per_fire": dig(phase, "cost.cpu_ms_per_fire"),
            "scheduler": kinds.get("scheduler"), "redis": kinds.get("redis"),
            "postgresql": kinds.get("postgresql"),
            "missed": dig(phase, "delivery.missed"),
            "duplicated": dig(phase, "delivery.duplicated"),
            "p99_ms": dig(phase, "delivery.lateness.p99_ms"),
            "fires_per_s": dig(phase, "delivery.fires_per_s")}


def _nodes_and_redis(side: dict[str, Any]) -> float | None:
    if side["scheduler"] is None:
        return None
    return float(side["scheduler"]) + float(side["redis"] or 0)


def limits_cost(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    jobs = params.jobs or DEFAULT_JOBS
    every = params.every or 1
    duration = params.duration or DEFAULT_DURATION
    runs = params.runs or DEFAULT_RUNS
    per_limit = jobs / every / LIMITS * HEADROOM
    opts.echo(f"limits: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
              f"{LIMITS} limits of {per_limit:g}/s against none, {runs} alternating pairs "
              f"of {duration:.0f} s, {opts.nodes} node(s)")

    def workload(now: int) -> Workload:
        every_ms = every * 1000
        return Workload(jobs, every_ms, (now // 1000) * 1000 - every_ms, spread=True,
                        shards=LIMITS)

    load_start = os.getloadavg()
    pairs: list[dict[str, Any]] = []
    def build(side: str, tag: str) -> CronmanSystem:
        if side == "none":
            return CronmanSystem(opts, tag)
        return CronmanSystem(opts, tag, limits=shard_limits(per_limit))

    for n in range(runs):
        pair: dict[str, Any] = {}
        for side in ("none", "limits"):
            tag = f"limits-{n}-{side}"
            outcome = run_phase(build(side, tag), workload, steady_window(opts.warmup, duration),
                                opts, label=tag)
            pair[side] = _side(outcome.result)
            pair[side]["load_1m"] = round(os.getloadavg()[0], 2)
        a, b = _nodes_and_redis(pair["limits"]), _nodes_and_redis(pair["none"])
        pair["ratio"] = round(a / b, 3) if a and b else None
        pair["extra_cpu_ms_per_fire"] = round(a - b, 4) if a is not None and b else None
        opts.echo(f"  pair {n + 1}: nodes+redis CPU ms/fire none {b}, limits {a}, "
                  f"ratio {pair['ratio']}")
        pairs.append(pair)
    load_end = os.getloadavg()

    def median(values: list[Any]) -> float | None:
        got = [float(v) for v in values if isinstance(v, int | float)]
        return round(statistics.median(got), 4) if got else None

    figures = {
        "median_ratio": median([p["ratio"] for p in pairs]),
        "median_extra_cpu_ms_per_fire": median([p["extra_cpu_ms_per_fire"] for p in pairs]),
        "median_none_cpu_ms_per_fire": median([_nodes_and_redis(p["none"]) for p in pairs]),
        "median_limits_cpu_ms_per_fire": median([_nodes_and_redis(p["limits"]) for p in pairs]),
        "median_none_postgresql": median([p["none"]["postgresql"] for p in pairs]),
        "median_limits_postgresql": median([p["limits"]["postgresql"] for p in pairs]),
        "missed": sum(int(p[s]["missed"] or 0) for p in pairs for s in ("none", "limits")),
        "duplicated": sum(int(p[s]["duplicated"] or 0) for p in pairs
                          for s in ("none", "limits")),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
    }
    rows = [f"pair {i + 1}: none {_nodes_and_redis(p['none'])} / limits "
            f"{_nodes_and_redis(p['limits'])} CPU ms per fire (nodes + Redis), ratio "
            f"{p['ratio']}; p99 {p['none']['p99_ms']} / {p['limits']['p99_ms']} ms"
            for i, p in enumerate(pairs)]
    rows.append(f"median: ratio {figures['median_ratio']}, extra "
                f"{figures['median_extra_cpu_ms_per_fire']} CPU ms per fire; load "
                f"{figures['load_average_start']} -> {figures['load_average_end']}")
    return {"scenario": "limits",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration, "runs": runs,
                       "limits": LIMITS, "per_limit_rate": per_limit, "nodes": opts.nodes},
            "phases": pairs, "figures": figures, "table": "\n".join(rows)}
