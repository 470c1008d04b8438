"""The benchmark scenarios: steady, max-rate, herd, million, kill.

Each returns a JSON-able dict: ``scenario``, ``params``, ``phases`` (one
result per system run), ``figures`` (the scenario's headline numbers) and
``table`` (the text printed at the end). cronman runs first, then each peer,
one after the other -- never side by side, so no system competes with another
for the machine's cores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cronman.bench.harness import (
    BenchOptions,
    CronmanSystem,
    PeerSystem,
    PhaseOutcome,
    System,
    ceil_second,
    fixed_window,
    run_phase,
    steady_window,
)
from cronman.bench.procs import BenchError
from cronman.bench.report import dig, format_table, lateness_summary, steady_after
from cronman.bench.workload import Workload
from cronman.config import DEFAULT_LEASE_SECONDS

SCENARIOS = ("steady", "max-rate", "herd", "million", "kill")
HERD_EVERY_S = 86_400


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
    search_steps: int = 3
    # herd
    lead: float | None = None


DEFAULTS: dict[str, dict[str, Any]] = {
    "steady": {"jobs": 1000, "every": 1, "duration": 60,
               "peers": ("apscheduler-memory", "apscheduler-sqlalchemy")},
    "max-rate": {"every": 1, "duration": 20,
                 "peers": ("apscheduler-memory", "apscheduler-sqlalchemy")},
    "herd": {"jobs": 50_000, "duration": 0,
             "peers": ("apscheduler-memory", "apscheduler-sqlalchemy")},
    "million": {"jobs": 1_000_000, "every": 3600, "duration": 120,
                "peers": ("apscheduler-memory",)},
    "kill": {"jobs": 1000, "every": 1, "duration": 60, "peers": ()},
}


def _param(scenario: str, params: ScenarioParams, name: str) -> Any:
    value = getattr(params, name)
    return DEFAULTS[scenario].get(name) if value is None else value


def _systems(opts: BenchOptions, peers: Sequence[str], tag: str
             ) -> list[tuple[str, Callable[[], System]]]:
    out: list[tuple[str, Callable[[], System]]] = [
        ("cronman", lambda: CronmanSystem(opts, f"{tag}-cronman"))]
    for kind in peers:
        out.append((kind, lambda k=kind: PeerSystem(k, opts, f"{tag}-{k}")))
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
        outcomes.append(_phase_or_error(name, build, opts, lambda s, n=name: run_phase(
            s, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
            label=f"steady-{n}")))
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


# ------------------------------------------------------------------ max-rate

def _trial_ok(result: dict[str, Any], limit_ms: int) -> bool:
    d = result.get("delivery") or {}
    p99 = dig(d, "lateness.p99_ms")
    return (d.get("missed") == 0 and d.get("duplicated_pairs") == 0 and p99 is not None
            and p99 <= limit_ms)


def max_rate(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Per system: the highest rate with 0 missed, 0 duplicated and p99 within the limit.

    Doubling from ``start_rate`` until a trial fails (or ``max_rate``), then
    ``search_steps`` bisections between the last pass and the first failure.
    Every trial is a fresh phase (new database, Redis, processes, receiver).
    """
    every = int(_param("max-rate", params, "every"))
    duration = float(_param("max-rate", params, "duration"))
    peers = _param("max-rate", params, "peers")
    limit = opts.p99_limit_ms
    opts.echo(f"max-rate: trials of {duration:.0f} s, jobs every {every} s, pass = 0 missed, "
              f"0 duplicated, p99 <= {limit} ms")
    systems: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "maxrate"):
        trials: list[dict[str, Any]] = []

        def trial(rate: float, name: str = name, build: Callable[[], System] = build,
                  trials: list[dict[str, Any]] = trials) -> bool:
            jobs = max(1, round(rate * every))
            opts.echo(f"  [{name}] trial at {jobs / every:,.0f} fires/s")
            o = _phase_or_error(name, build, opts, lambda s: run_phase(
                s, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
                label=f"maxrate-{name}-{jobs / every:.0f}"))
            res = o.result if isinstance(o, PhaseOutcome) else o
            ok = "error" not in res and _trial_ok(res, limit)
            trials.append({"rate_per_s": jobs / every, "ok": ok,
                           "fires_per_s": dig(res, "delivery.fires_per_s"),
                           "p99_ms": dig(res, "delivery.lateness.p99_ms"),
                           "missed": dig(res, "delivery.missed"),
                           "duplicated_pairs": dig(res, "delivery.duplicated_pairs"),
                           "cpu_ms_per_fire": dig(res, "cost.cpu_ms_per_fire"),
                           "error": res.get("error")})
            opts.echo(f"  [{name}] {jobs / every:,.0f} fires/s: {'pass' if ok else 'FAIL'} "
                      f"(p99 {trials[-1]['p99_ms']} ms, missed {trials[-1]['missed']}, "
                      f"dup {trials[-1]['duplicated_pairs']})")
            return ok

        best = search_highest(trial, params.start_rate, params.max_rate, params.search_steps)
        # Passing at the top of the search range means "at least".
        capped = best is not None and best * 2 > params.max_rate and all(
            t["ok"] for t in trials if t["rate_per_s"] >= best)
        systems[name] = {"highest_sustained_per_s": best, "at_least": capped,
                         "trials": trials}
    figures: dict[str, Any] = {f"{n}.highest_sustained_per_s": s["highest_sustained_per_s"]
                               for n, s in systems.items()}
    base = systems.get("cronman", {}).get("highest_sustained_per_s")
    for n, s in systems.items():
        other = s["highest_sustained_per_s"]
        if n != "cronman" and base and other:
            figures[f"cronman/{n}.highest_sustained"] = round(base / other, 2)
    width = max(len(k) for k in [*systems, *figures]) + 2
    lines = [f"{'system':<{width}}highest sustained fires/s (0 missed, 0 duplicated, "
             f"p99 <= {limit} ms)"]
    for n, s in systems.items():
        v = s["highest_sustained_per_s"]
        shown = "none" if v is None else f"{'>= ' if s['at_least'] else ''}{v:,.0f}"
        lines.append(f"{n:<{width}}{shown}")
    for k, v in figures.items():
        if "/" in k:
            lines.append(f"{k:<{width}}{v:,.2f}x")
    return {"scenario": "max-rate",
            "params": {"every_s": every, "trial_s": duration, "p99_limit_ms": limit,
                       "start_rate": params.start_rate, "max_rate": params.max_rate,
                       "nodes": opts.nodes, "peers": list(peers)},
            "systems": systems, "figures": figures, "table": "\n".join(lines)}


def search_highest(trial: Callable[[float], bool], start: float, limit: float,
                   steps: int, granularity: float = 50.0) -> float | None:
    """Highest rate for which ``trial`` passes: doubling, then bisection."""
    passed: float | None = None
    failed: float | None = None
    rate = start
    while rate <= limit:
        if trial(rate):
            passed = rate
            rate *= 2
        else:
            failed = rate
            break
    if passed is None:
        # Not even the start rate: look below it once, by halving.
        rate = start / 2
        while rate >= granularity:
            if trial(rate):
                passed = rate
                break
            failed = rate
            rate /= 2
        if passed is None:
            return None
    for _ in range(steps):
        if failed is None or failed - passed <= granularity:
            break
        mid = round((passed + failed) / 2 / granularity) * granularity
        if mid <= passed or mid >= failed:
            break
        if trial(mid):
            passed = mid
        else:
            failed = mid
    return passed


# ------------------------------------------------------------------ herd

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

    window = fixed_window(lambda w, _started: w.base_ms, 1000)

    phases = []
    figures: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "herd"):
        o = _phase_or_error(name, build, opts, lambda s, n=name: run_phase(
            s, maker(n), window, opts, label=f"herd-{n}", drain_max=max(opts.drain_max, 300),
            drain_idle=max(opts.drain_idle, 30), finish_when_complete=True))
        if isinstance(o, PhaseOutcome):
            res = o.result
            last = dig(res, "delivery.last_arrival_after_window_start_ms")
            delivered = res["delivery"]["delivered_unique"]
            res["herd"] = {"due_at_ms": o.workload.base_ms,
                           "ready_before_due_s": round((o.workload.base_ms - o.ready_ms)
                                                       / 1000, 2),
                           "last_arrival_after_due_ms": last,
                           "fires_per_s_until_last": round(delivered * 1000 / last, 1)
                           if last else None}
            # A one-second window says nothing about a rate: report the herd's.
            res["delivery"]["fires_per_s"] = res["herd"]["fires_per_s_until_last"]
            if o.workload.base_ms < o.ready_ms + 2000:
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


# ------------------------------------------------------------------ million

def million(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Many registered jobs: time from cold start to steady state, and memory."""
    jobs = int(_param("million", params, "jobs"))
    every = int(_param("million", params, "every"))
    duration = float(_param("million", params, "duration"))
    peers = _param("million", params, "peers")
    opts.echo(f"million: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
              f"measured from cold start for {duration:.0f} s")

    window = fixed_window(lambda _w, started: ceil_second(started), int(duration * 1000))

    phases = []
    figures: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "million"):
        # Misfire policy skip: the fire times that pass while a million jobs are
        # being created are not owed at start (APScheduler, which counts from
        # its own start, owes none either); a cold start is then loading, not
        # catching up a backlog the benchmark made.
        o = _phase_or_error(name, build, opts, lambda s, n=name: run_phase(
            s, past_anchors(jobs, every, misfire="skip"), window, opts,
            label=f"million-{n}"))
        if isinstance(o, PhaseOutcome):
            res = o.result
            buckets = o.tally.buckets(1000)
            steady = steady_after(o.tally, opts.p99_limit_ms)
            offset = (o.tally.start_ms - o.started_ms) / 1000
            res["million"] = {
                "steady_after_start_s": None if steady is None else round(steady + offset, 1),
                "p99_limit_ms": opts.p99_limit_ms,
                "rss_mb_per_process": {p["name"]: p["peak_rss_mb"]
                                       for p in res["cost"]["processes"]},
                "buckets": buckets,
            }
            if steady is not None:
                late = o.tally.lateness(since_ms=o.tally.start_ms + int(steady * 1000))
                res["million"]["after_steady"] = lateness_summary(late)
            res["million"]["missed_before_steady"] = sum(
                b["expected"] - b["delivered"] for b in buckets
                if steady is None or b["offset_s"] < steady)
            res["million"]["missed_after_steady"] = sum(
                b["expected"] - b["delivered"] for b in buckets
                if steady is not None and b["offset_s"] >= steady)
            figures[f"{name}.steady_after_start_s"] = res["million"]["steady_after_start_s"]
            figures[f"{name}.peak_rss_mb_max"] = res["cost"]["peak_rss_mb_max"]
        else:
            res = o
        phases.append(res)
    table = format_table([p for p in phases if "error" not in p], extra_rows=(
        ("steady after start, s", "million.steady_after_start_s", "{:,.1f}"),
        ("missed before steady", "million.missed_before_steady", "{:,}"),
        ("missed after steady", "million.missed_after_steady", "{:,}"),
        ("p99 after steady, ms", "million.after_steady.p99_ms", "{:,}"),
        ("job creation, s", "timings.prepare_s", "{:,.1f}"),
    ))
    return {"scenario": "million",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                       "nodes": opts.nodes, "peers": list(peers)},
            "phases": phases, "figures": figures, "table": table}


# ------------------------------------------------------------------ kill

def kill(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Steady load; one node is SIGKILLed halfway: extra lateness, lost, doubled."""
    jobs, every = int(_param("kill", params, "jobs")), int(_param("kill", params, "every"))
    duration = float(_param("kill", params, "duration"))
    if opts.nodes < 2:
        raise BenchError("the kill scenario needs at least 2 nodes")
    opts.echo(f"kill: {jobs:,} jobs every {every} s, {duration:.0f} s measured, one of "
              f"{opts.nodes} nodes SIGKILLed after {duration / 2:.0f} s")
    # Runs the victim had claimed come back through lease expiry: wait that long.
    patience = DEFAULT_LEASE_SECONDS + opts.heartbeat_ttl + 10
    o = run_phase(CronmanSystem(opts, "kill-cronman"), past_anchors(jobs, every),
                  steady_window(opts.warmup, duration), opts, label="kill-cronman",
                  kill_after_s=duration / 2, drain_max=max(opts.drain_max, patience + 30),
                  drain_idle=max(opts.drain_idle, patience))
    res = o.result
    t = o.tally
    figures: dict[str, Any] = {}
    if o.killed:
        k = o.killed["at_ms"]
        after_end = min(t.end_ms, k + int((opts.heartbeat_ttl + 5) * 1000))
        segments = {"before_kill": (t.start_ms, k), "after_kill": (k, after_end),
                    "rest": (after_end, t.end_ms)}
        seg_out = {}
        for seg, (lo, hi) in segments.items():
            late = t.lateness(lo, hi)
            owed = t.w.expected_count(lo, hi) if hi > lo else 0
            seg_out[seg] = {"from_s": round((lo - t.start_ms) / 1000, 1),
                            "to_s": round((hi - t.start_ms) / 1000, 1),
                            "expected": owed, "missed": owed - len(late),
                            "lateness": lateness_summary(late)}
        res["kill"] = {"node": o.killed["node"], "segments": seg_out}
        before = dig(seg_out, "before_kill.lateness.p99_ms")
        after = dig(seg_out, "after_kill.lateness.p99_ms")
        figures = {
            "lost": res["delivery"]["missed"],
            "doubled": res["delivery"]["duplicated_pairs"],
            "p99_before_kill_ms": before,
            "p99_after_kill_ms": after,
            "max_after_kill_ms": dig(seg_out, "after_kill.lateness.max_ms"),
            "extra_p99_ms": (after - before) if before is not None and after is not None
            else None,
        }
    table = format_table([res], extra_rows=(
        ("p99 before kill, ms", "kill.segments.before_kill.lateness.p99_ms", "{:,}"),
        ("p99 after kill (TTL+5 s), ms", "kill.segments.after_kill.lateness.p99_ms", "{:,}"),
        ("max after kill, ms", "kill.segments.after_kill.lateness.max_ms", "{:,}"),
        ("missed after kill", "kill.segments.after_kill.missed", "{:,}"),
    ))
    return {"scenario": "kill",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                       "nodes": opts.nodes, "replicas": opts.replicas,
                       "heartbeat_ttl_s": opts.heartbeat_ttl},
            "phases": [res], "figures": figures, "table": table}


RUNNERS: dict[str, Callable[[BenchOptions, ScenarioParams], dict[str, Any]]] = {
    "steady": steady, "max-rate": max_rate, "herd": herd, "million": million, "kill": kill,
}
