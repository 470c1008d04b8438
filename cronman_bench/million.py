"""The million scenario: very many registered jobs, measured from a cold
start (process launch) to steady state, and the memory it takes."""

from __future__ import annotations

from typing import Any

from cronman_bench.harness import PhaseOutcome, ceil_second, fixed_window, run_phase
from cronman_bench.report import dig, format_table, lateness_summary, steady_after
from cronman_bench.scenarios import ScenarioParams, _param, _phase_or_error, _systems, past_anchors
from cronman_bench.systems import BenchOptions, System

STEADY_HOLD_S = 30.0  # the window ends once steady state has held this long


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
