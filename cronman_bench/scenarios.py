"""The scenarios' shared parts -- parameters, the systems under test, the
workload, one phase per system -- and the steady scenario.

Each scenario returns a JSON-able dict: ``scenario``, ``params``, ``phases``
(one result per system run), ``figures`` (the scenario's headline numbers)
and ``table`` (the text printed at the end). cronman runs first, then each
peer, one after the other -- never side by side, so no system competes with
another for the machine's cores. The other scenarios have a module each
(``max_rate``, ``herd``, ``million``, ``kill``, ``overload``,
``priority_herd``, ``skew``, ``limit_accuracy``, ...; ``runners`` names them all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from cronman_bench.harness import PhaseOutcome, run_phase, steady_window
from cronman_bench.procs import BenchError
from cronman_bench.report import dig, format_table
from cronman_bench.systems import BenchOptions, CronmanSystem, System, make_peer
from cronman_bench.workload import Workload


@dataclass
class ScenarioParams:
    """What the command line asked for; None means the scenario's default."""

    jobs: int | None = None
    every: int | None = None
    duration: float | None = None
    peers: tuple[str, ...] | None = None  # None: the scenario's default peers
    # max-rate search
    start_rate: float = 250.0
    max_rate: float = 16_000.0
    rate_step: float = 1.25
    # herd
    lead: float | None = None
    # kill: seconds into the window when the node is killed (None: half the window)
    kill_at: float | None = None
    # overload: the knee (None: probed per system), phase lengths, the jobs' misfire grace
    rate: float | None = None
    phase_seconds: float = 60.0
    recover_seconds: float = 180.0
    probe_duration: float = 10.0
    grace: int | None = None
    # priority-herd: high-priority herd jobs, and the other namespace's steady jobs
    high_jobs: int = 1000
    steady_jobs: int = 100
    # skew: libfaketime offsets of one node
    skews: tuple[str, ...] | None = None
    # chaos: the window's length, the nemesis' seed, the database (postgresql, patroni)
    minutes: float | None = None
    seed: int | None = None
    database: str = "postgresql"
    # work-queue: waiting claimers, and worker SIGKILLs
    claimers: int | None = None
    kills: int | None = None
    claim_spin: bool = False
    # limits: alternating pairs (none, 100 limits); limit-accuracy: rounds of the faults
    runs: int | None = None
    # limit-accuracy: the limit's concurrency (its rate is ``rate``), the
    # receiver's answer time, and the faults, one phase each
    limit_concurrency: int | None = None
    answer_ms: int | None = None
    faults: tuple[str, ...] | None = None
    claim_max: int | None = None
    # tracing: rounds of off / 1 % / 100 %
    rounds: int = 3


DEFAULTS: dict[str, dict[str, Any]] = {
    "steady": {"jobs": 1000, "every": 1, "duration": 60,
               "peers": ("apscheduler-memory", "apscheduler-sqlalchemy",
                         "apscheduler4-postgres")},
    "max-rate": {"every": 1, "duration": 20,
                 "peers": ("apscheduler-memory", "apscheduler4-postgres")},
    "herd": {"jobs": 50_000, "duration": 0,
             "peers": ("apscheduler-memory", "apscheduler-sqlalchemy")},
    "million": {"jobs": 1_000_000, "every": 3600, "duration": 600,
                "peers": ("apscheduler-memory",)},
    "kill": {"jobs": 1000, "every": 1, "duration": 120, "peers": ()},
    "patroni-failover": {"jobs": 1000, "every": 1, "duration": 45, "peers": ()},
    "overload": {"peers": ("apscheduler-memory",)},
    "priority-herd": {"jobs": 20_000, "duration": 60, "peers": ()},
    "skew": {"duration": 60, "peers": ()},
    "tracing": {"duration": 30, "peers": ()},
    "chaos": {"peers": ()},
}


def _param(scenario: str, params: ScenarioParams, name: str) -> Any:
    value = getattr(params, name)
    return DEFAULTS[scenario].get(name) if value is None else value


def _systems(opts: BenchOptions, peers: Sequence[str], tag: str
             ) -> list[tuple[str, Callable[[], System]]]:
    out: list[tuple[str, Callable[[], System]]] = [
        ("cronman", lambda: CronmanSystem(opts, f"{tag}-cronman"))]
    for kind in peers:
        out.append((kind, partial(make_peer, kind, opts, f"{tag}-{kind}")))
    return out


def past_anchors(jobs: int, every_s: int, misfire: str | None = None
                 ) -> Callable[[int], Workload]:
    """Anchors spread over the interval that ended at creation time.

    Every anchor lies in the past, so each system fires anchor + k*every from
    now on and nobody has to guess what a future anchor means.
    """
    def make(now: int) -> Workload:
        every_ms = every_s * 1000
        return Workload(jobs, every_ms, (now // 1000) * 1000 - every_ms, spread=True,
                        misfire=misfire)
    return make


def _phase_or_error(name: str, build: Callable[[], System], opts: BenchOptions,
                    run: Callable[[System], PhaseOutcome]) -> PhaseOutcome | dict[str, Any]:
    try:
        return run(build())
    except BenchError as exc:
        opts.echo(f"  [{name}] failed: {exc}")
        return {"system": name, "error": str(exc)}


def _results(outcomes: Sequence[PhaseOutcome | dict[str, Any]]) -> list[dict[str, Any]]:
    return [o.result if isinstance(o, PhaseOutcome) else o for o in outcomes]


# ------------------------------------------------------------------ steady

def steady(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    jobs, every = int(_param("steady", params, "jobs")), int(_param("steady", params, "every"))
    duration = float(_param("steady", params, "duration"))
    peers = _param("steady", params, "peers")
    opts.echo(f"steady: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
              f"{duration:.0f} s measured, {opts.nodes} cronman node(s)")
    outcomes = []
    for name, build in _systems(opts, peers, "steady"):
        def run(s: System, n: str = name) -> PhaseOutcome:
            return run_phase(s, past_anchors(jobs, every), steady_window(opts.warmup, duration),
                             opts, label=f"steady-{n}")

        outcomes.append(_phase_or_error(name, build, opts, run))
    phases = _results(outcomes)
    return {
        "scenario": "steady",
        "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                   "rate_per_s": jobs / every, "nodes": opts.nodes, "replicas": opts.replicas,
                   "peers": list(peers)},
        "phases": phases,
        "figures": _ratios(phases),
        "table": format_table([p for p in phases if "error" not in p]),
    }


def _ratios(phases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    base = next((p for p in phases if p.get("system") == "cronman" and "error" not in p), None)
    out: dict[str, Any] = {}
    if base is None:
        return out
    for p in phases:
        if p is base or "error" in p:
            continue
        for label, key in (("fires_per_s", "delivery.fires_per_s"),
                           ("p99_ms", "delivery.lateness.p99_ms"),
                           ("cpu_ms_per_fire", "cost.cpu_ms_per_fire")):
            a, b = dig(base, key), dig(p, key)
            if isinstance(a, int | float) and isinstance(b, int | float) and b:
                out[f"cronman/{p['system']}.{label}"] = round(a / b, 3)
    return out
