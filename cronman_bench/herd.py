"""The herd scenario: many jobs all due at one instant, and how long until
the last of them arrives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cronman_bench.harness import PhaseOutcome, ceil_second, fixed_window, run_phase
from cronman_bench.report import dig, format_table
from cronman_bench.scenarios import ScenarioParams, _param, _phase_or_error, _systems
from cronman_bench.systems import BenchOptions, System
from cronman_bench.workload import Workload

HERD_EVERY_S = 86_400  # a herd job's interval: it fires once inside any window


def herd(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """J jobs all due at the same instant: how long until the last one arrives."""
    jobs = int(_param("herd", params, "jobs"))
    peers = _param("herd", params, "peers")
    opts.echo(f"herd: {jobs:,} jobs all due at one instant")

    def lead_of(name: str) -> float:
        """Seconds from job creation to the herd: time to create and load the jobs."""
        if params.lead is not None:
            return params.lead
        # APScheduler's SQLAlchemyJobStore inserts (and commits) one job at a time.
        return 20 + jobs / (400 if name == "apscheduler-sqlalchemy" else 1000)

    def maker(name: str) -> Callable[[int], Workload]:
        def make(now: int) -> Workload:
            return Workload(jobs, HERD_EVERY_S * 1000,
                            ceil_second(now + int(lead_of(name) * 1000)), spread=False)
        return make

    window = fixed_window(lambda w, _started: w.parts[0].base_ms, 1000)

    phases = []
    figures: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "herd"):
        def run(s: System, n: str = name) -> PhaseOutcome:
            return run_phase(s, maker(n), window, opts, label=f"herd-{n}",
                             drain_max=max(opts.drain_max, 300),
                             drain_idle=max(opts.drain_idle, 30), finish_when_complete=True)

        o = _phase_or_error(name, build, opts, run)
        if isinstance(o, PhaseOutcome):
            res = o.result
            last = dig(res, "delivery.last_arrival_after_window_start_ms")
            delivered = res["delivery"]["delivered_unique"]
            due = o.workload.parts[0].base_ms
            res["herd"] = {"due_at_ms": due,
                           "ready_before_due_s": round((due - o.ready_ms)
                                                       / 1000, 2),
                           "last_arrival_after_due_ms": last,
                           "fires_per_s_until_last": round(delivered * 1000 / last, 1)
                           if last else None}
            # A one-second window says nothing about a rate: report the herd's.
            res["delivery"]["fires_per_s"] = res["herd"]["fires_per_s_until_last"]
            if due < o.ready_ms + 2000:
                res["notes"].append("the herd was due less than 2 s after start-up: "
                                    "raise --lead")
            figures[f"{name}.last_arrival_after_due_s"] = None if last is None else last / 1000
        else:
            res = o
        phases.append(res)
    base = figures.get("cronman.last_arrival_after_due_s")
    for n in peers:
        other = figures.get(f"{n}.last_arrival_after_due_s")
        if base and other:
            figures[f"cronman/{n}.last_arrival"] = round(base / other, 3)
    table = format_table([p for p in phases if "error" not in p], extra_rows=(
        ("last arrival after due, ms", "herd.last_arrival_after_due_ms", "{:,}"),
        ("ready before due, s", "herd.ready_before_due_s", "{:,.1f}"),
    ))
    return {"scenario": "herd",
            "params": {"jobs": jobs, "nodes": opts.nodes, "peers": list(peers),
                       "lead_s": {n: lead_of(n) for n, _ in _systems(opts, peers, "herd")}},
            "phases": phases, "figures": figures, "table": table}
