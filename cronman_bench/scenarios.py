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
from functools import partial
from typing import Any

from cronman_bench.harness import (
    PhaseOutcome,
    ceil_second,
    fixed_window,
    run_phase,
    steady_window,
)
from cronman_bench.procs import BenchError
from cronman_bench.report import dig, format_table, lateness_summary, steady_after
from cronman_bench.systems import BenchOptions, CronmanSystem, System, make_peer
from cronman_bench.workload import Workload

HERD_EVERY_S = 86_400
STEADY_HOLD_S = 30.0  # million: the window ends once steady state has held this long


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
    "overload": {"peers": ("apscheduler-memory",)},
    "priority-herd": {"jobs": 20_000, "duration": 60, "peers": ()},
    "skew": {"duration": 60, "peers": ()},
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


# ------------------------------------------------------------------ max-rate

def trial_verdict(result: dict[str, Any], limit_ms: int) -> str:
    """``pass``, ``fail`` (a fire missed or arrived twice, or p99 over the limit)
    or ``error`` (the trial could not run: a process exited, set-up failed)."""
    if "error" in result:
        return "error"
    d = result.get("delivery") or {}
    p99 = dig(d, "lateness.p99_ms")
    ok = (d.get("missed") == 0 and d.get("duplicated_pairs") == 0 and p99 is not None
          and p99 <= limit_ms)
    return "pass" if ok else "fail"


def rate_ladder(start: float, step: float, limit: float) -> list[int]:
    """Rates from ``start`` up to ``limit``, each ``step`` times the last,
    rounded to two significant figures (250, 310, 390, 490, 610, ...)."""
    if step <= 1:
        raise ValueError("the rate step must be more than 1")
    rates: list[int] = []
    r = float(start)
    while r <= limit * 1.0001:
        digits = max(0, len(str(int(r))) - 2)
        v = max(1, int(round(r, -digits)))
        if not rates or v > rates[-1]:
            rates.append(v)
        r *= step
    return rates


@dataclass
class SearchOutcome:
    """The highest rate that passed, and how the search ended."""

    highest: int | None
    first_failure: int | None = None  # the rate that stopped the search
    error_at: int | None = None  # a trial that could not run stopped it
    capped: bool = False  # every rate up to the top of the range passed
    below_start: bool = False  # the start rate failed; found by halving


def search_highest(trial: Callable[[int], str], start: float, limit: float, step: float
                   ) -> SearchOutcome:
    """Climb the rate ladder until the first rate that does not pass.

    Every rate up to the one reported passed; the first that failed ends the
    search (no retry, no bisection: "sustained" means every lower step held).
    If the start rate fails, rates halve until one passes (down to 1/s).
    """
    last: int | None = None
    for rate in rate_ladder(start, step, limit):
        verdict = trial(rate)
        if verdict == "pass":
            last = rate
            continue
        if verdict == "error":
            return SearchOutcome(last, error_at=rate)
        if last is not None:
            return SearchOutcome(last, first_failure=rate)
        # The start rate failed: halve until a rate passes.
        lower = rate // 2
        while lower >= 1:
            verdict = trial(lower)
            if verdict == "pass":
                return SearchOutcome(lower, first_failure=rate, below_start=True)
            if verdict == "error":
                return SearchOutcome(None, first_failure=rate, error_at=lower)
            rate, lower = lower, lower // 2
        return SearchOutcome(None, first_failure=rate)
    return SearchOutcome(last, capped=last is not None)


def max_rate(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Per system: the highest rate with 0 missed, 0 duplicated and p99 within the limit.

    Trials climb a ladder of rates (``start_rate`` times ``rate_step`` per
    step, up to ``max_rate``) and stop at the first that fails; the answer is
    the last that passed. Every trial is a fresh phase (new database, Redis,
    processes, receiver) with J = rate x every jobs.
    """
    every = int(_param("max-rate", params, "every"))
    duration = float(_param("max-rate", params, "duration"))
    peers = _param("max-rate", params, "peers")
    limit = opts.p99_limit_ms
    ladder = rate_ladder(params.start_rate, params.rate_step, params.max_rate)
    opts.echo(f"max-rate: trials of {duration:.0f} s (after a {opts.warmup:.0f} s warm-up), "
              f"jobs every {every} s, rates {', '.join(f'{r:,}' for r in ladder[:8])}"
              f"{', ...' if len(ladder) > 8 else ''} up to {ladder[-1]:,}/s; pass = 0 missed, "
              f"0 duplicated, p99 <= {limit} ms; each system stops at its first failure")
    systems: dict[str, Any] = {}

    def partial() -> dict[str, Any]:
        return {"scenario": "max-rate", "partial": True, "systems": systems}

    for name, build in _systems(opts, peers, "maxrate"):
        trials: list[dict[str, Any]] = []
        systems[name] = {"trials": trials}

        def trial(rate: int, name: str = name, build: Callable[[], System] = build,
                  trials: list[dict[str, Any]] = trials) -> str:
            jobs = max(1, rate * every)
            opts.echo(f"  [{name}] trial {len(trials) + 1} at {jobs / every:,.0f} fires/s "
                      f"({jobs:,} jobs)")
            o = _phase_or_error(name, build, opts, lambda s: run_phase(
                s, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
                label=f"maxrate-{name}-{jobs / every:.0f}"))
            res = o.result if isinstance(o, PhaseOutcome) else o
            verdict = trial_verdict(res, limit)
            t = {"rate_per_s": jobs / every, "verdict": verdict,
                 "fires_per_s": dig(res, "delivery.fires_per_s"),
                 "p99_ms": dig(res, "delivery.lateness.p99_ms"),
                 "max_ms": dig(res, "delivery.lateness.max_ms"),
                 "missed": dig(res, "delivery.missed"),
                 "duplicated_pairs": dig(res, "delivery.duplicated_pairs"),
                 "cpu_ms_per_fire": dig(res, "cost.cpu_ms_per_fire"),
                 "error": res.get("error"), "phase": res}
            trials.append(t)
            opts.echo(f"  [{name}] {jobs / every:,.0f} fires/s: {verdict.upper()} "
                      f"(p99 {t['p99_ms']} ms, missed {t['missed']}, "
                      f"duplicated {t['duplicated_pairs']})")
            if opts.checkpoint is not None:
                opts.checkpoint(partial())
            return verdict

        found = search_highest(trial, params.start_rate, params.max_rate, params.rate_step)
        systems[name].update({
            "highest_sustained_per_s": found.highest, "at_least": found.capped or (
                found.error_at is not None),
            "first_failure_per_s": found.first_failure, "error_at_per_s": found.error_at,
            "below_start": found.below_start, "capped_by_range": found.capped})
    figures: dict[str, Any] = {f"{n}.highest_sustained_per_s": s["highest_sustained_per_s"]
                               for n, s in systems.items()}
    base = systems.get("cronman", {})
    for n, s in systems.items():
        other = s["highest_sustained_per_s"]
        if n != "cronman" and base.get("highest_sustained_per_s") and other:
            ratio = round(base["highest_sustained_per_s"] / other, 2)
            # A lower bound on either side makes the ratio a bound, or unknown.
            exact = not base["at_least"] and not s["at_least"]
            figures[f"cronman/{n}.highest_sustained"] = ratio
            figures[f"cronman/{n}.ratio_kind"] = "exact" if exact else (
                ">=" if base["at_least"] and not s["at_least"] else
                "<=" if s["at_least"] and not base["at_least"] else "unknown")
    return {"scenario": "max-rate",
            "params": {"every_s": every, "trial_s": duration, "warmup_s": opts.warmup,
                       "p99_limit_ms": limit, "start_rate": params.start_rate,
                       "rate_step": params.rate_step, "max_rate": params.max_rate,
                       "ladder": ladder, "nodes": opts.nodes, "replicas": opts.replicas,
                       "peers": list(peers)},
            "systems": systems, "figures": figures,
            "table": _max_rate_table(systems, figures, limit)}


def _max_rate_table(systems: dict[str, Any], figures: dict[str, Any], limit: int) -> str:
    def shown(s: dict[str, Any]) -> str:
        v = s["highest_sustained_per_s"]
        text = "none" if v is None else f"{'>= ' if s['at_least'] else ''}{v:,}"
        if s["first_failure_per_s"] is not None:
            text += f" (failed at {s['first_failure_per_s']:,})"
        if s["error_at_per_s"] is not None:
            text += f" (trial at {s['error_at_per_s']:,} could not run: see JSON)"
        if s["capped_by_range"]:
            text += " (top of the range: raise --max-rate)"
        return text

    rows = [(n, shown(s)) for n, s in systems.items()]
    for n in systems:
        key = f"cronman/{n}.highest_sustained"
        if key in figures:
            kind = figures[f"cronman/{n}.ratio_kind"]
            rows.append((f"cronman/{n}", {"exact": "", ">=": ">= ", "<=": "<= "}.get(
                kind, "? ") + f"{figures[key]:,.2f}x"))
    rows.append(("", ""))
    for n, s in systems.items():
        for t in s["trials"]:
            rows.append((f"  {n} {t['rate_per_s']:,.0f}/s",
                         f"{t['verdict']}: p99 {t['p99_ms']} ms, max {t['max_ms']} ms, "
                         f"missed {t['missed']}, duplicated {t['duplicated_pairs']}"))
    width = max(len(r[0]) for r in rows) + 2
    head = (f"{'system':<{width}}highest sustained fires/s (every lower step passed: "
            f"0 missed, 0 duplicated, p99 <= {limit} ms)")
    return "\n".join([head, *(f"{a:<{width}}{b}".rstrip() for a, b in rows)])


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


# ------------------------------------------------------------------ million

def million(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Many registered jobs: time from cold start to steady state, and memory.

    The window opens at process launch. Steady state is reached when every
    node has loaded its jobs (its own log says so; APScheduler: its jobs are
    added and it started) *and* the receiver shows every owed fire arriving
    with p99 within the limit from then on (``steady_after``); the figure is
    the later of the two, in seconds from launch. The window closes
    ``STEADY_HOLD_S`` after that, or after ``duration`` at the latest.
    """
    jobs = int(_param("million", params, "jobs"))
    every = int(_param("million", params, "every"))
    duration = float(_param("million", params, "duration"))
    peers = _param("million", params, "peers")
    opts.echo(f"million: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s) on "
              f"{opts.nodes} node(s), measured from process launch until steady state has "
              f"held {STEADY_HOLD_S:.0f} s (at most {duration:.0f} s)")

    window = fixed_window(lambda _w, started: ceil_second(started), int(duration * 1000))

    phases = []
    figures: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "million"):
        # Misfire policy skip: the fire times that pass while a million jobs are
        # being created are not owed at start (APScheduler, which counts from
        # its own start, owes none either); a cold start is then loading, not
        # catching up a backlog the benchmark made.
        def run(s: System, n: str = name) -> PhaseOutcome:
            return run_phase(s, past_anchors(jobs, every, misfire="skip"), window, opts,
                             label=f"million-{n}", end_when_steady_s=STEADY_HOLD_S)

        o = _phase_or_error(name, build, opts, run)
        if isinstance(o, PhaseOutcome):
            res = o.result
            res["million"] = cold_start_figures(o, opts.p99_limit_ms)
            m = res["million"]
            # cronman's jobs are in the database before launch; APScheduler adds
            # its own after launch, inside "all loaded".
            m["jobs_created_before_launch_s"] = (dig(res, "timings.prepare_s")
                                                 if name == "cronman" else None)
            figures[f"{name}.steady_state_after_launch_s"] = m["steady_state_after_launch_s"]
            figures[f"{name}.all_loaded_after_launch_s"] = m["all_loaded_after_launch_s"]
            figures[f"{name}.peak_rss_mb"] = m["peak_rss_mb"]
            if m["steady_state_after_launch_s"] is None:
                res["notes"].append(
                    "no steady state inside the window: a node never loaded, or fires were "
                    "missed or over the p99 limit until less than 10 s were left; raise "
                    "--duration (the longest window)")
        else:
            res = o
        phases.append(res)
    table = format_table([p for p in phases if "error" not in p], extra_rows=(
        ("steady state after launch, s", "million.steady_state_after_launch_s", "{:,.1f}"),
        ("  all loaded after launch, s", "million.all_loaded_after_launch_s", "{:,.1f}"),
        ("  on time from (receiver), s", "million.on_time_after_launch_s", "{:,.1f}"),
        ("first callback after launch, s", "million.first_callback_after_launch_s",
         "{:,.1f}"),
        ("missed before steady", "million.missed_before_steady", "{:,}"),
        ("missed after steady", "million.missed_after_steady", "{:,}"),
        ("p99 after steady, ms", "million.after_steady.p99_ms", "{:,}"),
        ("peak RSS MB per process", "million.peak_rss_mb_text", "{}"),
        ("jobs created before launch, s", "million.jobs_created_before_launch_s",
         "{:,.1f}"),
    ))
    return {"scenario": "million",
            "params": {"jobs": jobs, "every_s": every, "duration_max_s": duration,
                       "steady_hold_s": STEADY_HOLD_S,
                       "rate_per_s": jobs / every, "nodes": opts.nodes,
                       "replicas": opts.replicas, "p99_limit_ms": opts.p99_limit_ms,
                       "peers": list(peers)},
            "phases": phases, "figures": figures, "table": table}


def cold_start_figures(o: PhaseOutcome, p99_limit_ms: int) -> dict[str, Any]:
    """Steady state after launch, what was missed before and after it, memory."""
    t = o.tally
    offset_s = (t.start_ms - o.started_ms) / 1000  # window start, from launch
    on_time = steady_after(t, p99_limit_ms)
    on_time_s = None if on_time is None else round(on_time + offset_s, 1)
    loaded = {n: None if ms is None else round((ms - o.started_ms) / 1000, 1)
              for n, ms in o.loaded_ms.items()}
    all_loaded_s = None if not loaded or None in loaded.values() else max(
        v for v in loaded.values() if v is not None)
    steady_s = None if on_time_s is None or all_loaded_s is None else max(on_time_s,
                                                                        all_loaded_s)
    buckets = t.buckets(1000)
    steady_from = None if steady_s is None else steady_s - offset_s  # from window start
    rss = {p["name"]: p["peak_rss_mb"] for p in o.result["cost"]["processes"]}
    out: dict[str, Any] = {
        "steady_state_after_launch_s": steady_s,
        "all_loaded_after_launch_s": all_loaded_s,
        "loaded_after_launch_s": loaded,
        "on_time_after_launch_s": on_time_s,
        "first_callback_after_launch_s": None if t.first_arrival_ms is None
        else round((t.first_arrival_ms - o.started_ms) / 1000, 1),
        "p99_limit_ms": p99_limit_ms,
        "peak_rss_mb": rss,
        "peak_rss_mb_text": " / ".join(f"{v:,.0f}" for v in rss.values() if v is not None),
        "missed_before_steady": sum(b["expected"] - b["delivered"] for b in buckets
                                    if steady_from is None or b["offset_s"] < steady_from),
        "missed_after_steady": sum(b["expected"] - b["delivered"] for b in buckets
                                   if steady_from is not None and b["offset_s"] >= steady_from),
        "buckets": buckets,
    }
    if steady_from is not None:
        out["after_steady"] = lateness_summary(
            t.lateness(since_ms=t.start_ms + int(steady_from * 1000)))
    return out


# ------------------------------------------------------------------ kill

KILL_MARGIN_S = 5.0  # fires due this long before the kill may be in flight on the victim


def kill(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Steady load; one node is SIGKILLed mid-window: extra lateness, lost, doubled.

    Fires are split by fire time: *steady* (due before kill - 5 s), *around
    the kill* (kill - 5 s to kill + heartbeat TTL + 5 s: in flight on the
    victim, or owned by it until the others saw it gone) and *after*. The
    drain lasts until lease + TTL + 10 s after the kill, so runs the victim
    had started come back through the sweeper and are counted.
    """
    jobs, every = int(_param("kill", params, "jobs")), int(_param("kill", params, "every"))
    duration = float(_param("kill", params, "duration"))
    kill_at = params.kill_at if params.kill_at is not None else duration / 2
    if opts.nodes < 2:
        raise BenchError("the kill scenario needs at least 2 nodes")
    if not 0 < kill_at < duration:
        raise BenchError(f"--kill-at ({kill_at:g} s) must lie inside the window "
                         f"(0 .. {duration:g} s)")
    settle = opts.lease_seconds + opts.heartbeat_ttl + 10
    opts.echo(f"kill: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
              f"{duration:.0f} s measured, one of {opts.nodes} nodes SIGKILLed "
              f"{kill_at:.0f} s into it; drain until {settle:.0f} s after the kill "
              f"(lease {opts.lease_seconds:g} s + heartbeat TTL {opts.heartbeat_ttl:g} s + 10 s)")
    system = CronmanSystem(opts, "kill-cronman")
    o = run_phase(system, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
                  label="kill-cronman", kill_after_s=kill_at, settle_after_kill_s=settle,
                  drain_max=max(opts.drain_max, settle + 30))
    res = o.result
    figures: dict[str, Any] = {}
    if o.killed is None:
        res["notes"].append("no node was killed (the window ended first)")
    else:
        res["kill"] = kill_figures(o, opts.heartbeat_ttl, system)
        k = res["kill"]
        seg = k["segments"]
        steady_p99 = dig(seg, "steady.lateness.p99_ms")
        around_p99 = dig(seg, "around_kill.lateness.p99_ms")
        figures = {
            "lost": res["delivery"]["missed"],
            "doubled": res["delivery"]["doubled_pairs"],
            "redelivered": res["delivery"]["redelivered_pairs"],
            "redeliveries": res["delivery"]["redeliveries"],
            "first_sent_by_sweeper": res["delivery"]["first_by_later_attempt"],
            "p99_steady_ms": steady_p99,
            "p99_around_kill_ms": around_p99,
            "extra_p99_ms": (around_p99 - steady_p99)
            if steady_p99 is not None and around_p99 is not None else None,
            "max_around_kill_ms": dig(seg, "around_kill.lateness.max_ms"),
            "p99_after_ms": dig(seg, "after.lateness.p99_ms"),
            "survivors_saw_it_gone_after_s": k["survivors_saw_it_gone_after_s"],
        }
        res["kill"]["figures"] = figures
    table = format_table([res], extra_rows=(
        ("lost (missed)", "kill.figures.lost", "{:,}"),
        ("doubled", "kill.figures.doubled", "{:,}"),
        ("redelivered pairs", "kill.figures.redelivered", "{:,}"),
        ("first sent by the sweeper", "kill.figures.first_sent_by_sweeper", "{:,}"),
        ("p99 steady (before kill - 5 s), ms", "kill.segments.steady.lateness.p99_ms", "{:,}"),
        ("p99 around kill, ms", "kill.segments.around_kill.lateness.p99_ms", "{:,}"),
        ("extra p99 around kill, ms", "kill.figures.extra_p99_ms", "{:,}"),
        ("max around kill, ms", "kill.segments.around_kill.lateness.max_ms", "{:,}"),
        ("p99 after (TTL + 5 s on), ms", "kill.segments.after.lateness.p99_ms", "{:,}"),
        ("survivors saw it gone after, s", "kill.survivors_saw_it_gone_text", "{}"),
    ))
    return {"scenario": "kill",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                       "kill_at_s": kill_at, "nodes": opts.nodes, "replicas": opts.replicas,
                       "heartbeat_ttl_s": opts.heartbeat_ttl,
                       "lease_s": opts.lease_seconds, "settle_after_kill_s": settle},
            "phases": [res], "figures": figures, "table": table}


def kill_figures(o: PhaseOutcome, heartbeat_ttl: float, system: CronmanSystem
                 ) -> dict[str, Any]:
    """Per segment of fire times: owed, missed, lateness, doubled, redelivered."""
    assert o.killed is not None
    t, k, victim = o.tally, o.killed["at_ms"], o.killed["node"]
    lo = max(t.start_ms, k - int(KILL_MARGIN_S * 1000))
    hi = min(t.end_ms, k + int((heartbeat_ttl + 5) * 1000))
    segments = {"steady": (t.start_ms, lo), "around_kill": (lo, hi), "after": (hi, t.end_ms)}
    out: dict[str, Any] = {}
    for name, (a, b) in segments.items():
        late = t.lateness(a, b)
        owed = t.w.expected_count(a, b) if b > a else 0
        out[name] = {"from_s": round((a - t.start_ms) / 1000, 1),
                     "to_s": round((b - t.start_ms) / 1000, 1),
                     "expected": owed, "missed": owed - len(late),
                     "lateness": lateness_summary(late), **t.kinds(a, b)}
    gone: dict[str, float | None] = {}
    for name, log in system.logs.items():
        if name != victim:
            seen = log.left_after(victim, k)
            gone[name] = None if seen is None else round((seen - k) / 1000, 1)
    return {"node": victim, "at_s": round((k - t.start_ms) / 1000, 1), "segments": out,
            "survivors_saw_it_gone_after_s": gone,
            "survivors_saw_it_gone_text": " / ".join(
                "-" if v is None else f"{v:.1f}" for v in gone.values())}


